// libgpumem_torch.so's options (gpumem_configure), without a GPU: every key the PyTorch / CuPy
// adaptor takes is parsed, a bad value is refused by name and changes nothing, and trace=PATH is
// taken. The library is loaded with dlopen, as PyTorch loads it; configure touches no CUDA call.
// Built where the adaptor is (a CUDA build without sanitizers): GPUMEM_TORCH_LIB names it.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <string>

namespace {

#ifdef GPUMEM_TORCH_LIB
struct adaptor {
  void* lib = dlopen(GPUMEM_TORCH_LIB, RTLD_NOW | RTLD_LOCAL);
  int (*configure)(const char*) = nullptr;
  const char* (*last_error)() = nullptr;
  adaptor() {
    if (!lib) return;
    configure = reinterpret_cast<int (*)(const char*)>(dlsym(lib, "gpumem_configure"));
    last_error = reinterpret_cast<const char* (*)()>(dlsym(lib, "gpumem_last_error"));
  }
};

adaptor& lib() {
  static adaptor a;  // one copy per process, as in PyTorch: its options live until first use
  return a;
}

TEST(TorchAdaptorConfig, EveryPoolOptionKeyIsTakenAndBadValuesAreRefusedByName) {
  adaptor& a = lib();
  ASSERT_NE(a.lib, nullptr) << dlerror();
  ASSERT_NE(a.configure, nullptr);
  ASSERT_NE(a.last_error, nullptr);
  EXPECT_EQ(a.configure("idle_budget=0.1,grow_before_reclaim=1,front_cache_grow_fraction=0.5,"
                        "front_cache_peak_fraction=1,front_cache_reserve_headroom=0.2,reclaim_own_first=1,wait_before_grow=1,remap_time_budget=0.02,"
                        "stream_ordered_moves=0,reserve_ceiling=1.03,"
                        "max_handle_bytes=8M,initial_reserve=1G,front_cache_bytes=64M,release_threshold=max,upstream=vmm"),
            0)
      << a.last_error();
  for (const char* bad : {"front_cache_peak_fraction=-1", "front_cache_reserve_headroom=-0.1", "reclaim_own_first=2", "wait_before_grow=maybe",
                          "max_handle_bytes=lots", "initial_reserve_bytes=much", "trace=", "no_such_key=1", "upstream=floppy",
                          "remap_time_budget=1.5", "remap_time_budget=-0.1", "stream_ordered_moves=yes please",
                          "reserve_ceiling=0.5", "reserve_ceiling=-1"}) {
    EXPECT_EQ(a.configure(bad), -2) << bad;
    const std::string why = a.last_error();
    const std::string key = std::string(bad).substr(0, std::string(bad).find('='));
    EXPECT_NE(why.find(key), std::string::npos) << bad << ": " << why;
  }
  // A trace path is taken (the file is opened only when the first pool is made).
  EXPECT_EQ(a.configure("trace=/tmp/gpumem-config-test-{pid}.csv"), 0) << a.last_error();
}
#else
TEST(TorchAdaptorConfig, EveryPoolOptionKeyIsTakenAndBadValuesAreRefusedByName) {
  GTEST_SKIP() << "libgpumem_torch.so is not built here (no CUDA toolkit, or a sanitizer build)";
}
#endif

}  // namespace
