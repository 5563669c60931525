// libgpumem_torch.so's options (gpumem_configure, GPUMEM_CONFIG), without a GPU: every key the
// PyTorch / CuPy adaptor takes is parsed, a bad key or value is refused by name and changes
// nothing, a refused configuration keeps the pool from starting (saying why on stderr), and
// trace=PATH is taken. The library is loaded with dlopen, as PyTorch loads it; configure touches no
// CUDA call. Built where the adaptor is (a CUDA build without sanitizers): GPUMEM_TORCH_LIB names it.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <sys/types.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

namespace {

#ifdef GPUMEM_TORCH_LIB
struct adaptor {
  void* lib = nullptr;
  int (*configure)(const char*) = nullptr;
  const char* (*last_error)() = nullptr;
  void* (*alloc_nothrow)(ssize_t, int, void*) = nullptr;
  explicit adaptor(const char* path = GPUMEM_TORCH_LIB) : lib(dlopen(path, RTLD_NOW | RTLD_LOCAL)) {
    if (!lib) return;
    configure = reinterpret_cast<int (*)(const char*)>(dlsym(lib, "gpumem_configure"));
    last_error = reinterpret_cast<const char* (*)()>(dlsym(lib, "gpumem_last_error"));
    alloc_nothrow = reinterpret_cast<void* (*)(ssize_t, int, void*)>(dlsym(lib, "gpumem_alloc_nothrow"));
  }
};

// A copy of the library at its own path: dlopen then loads a fresh instance, whose GPUMEM_CONFIG
// is read anew (the shared one has read it already).
std::string fresh_copy(const char* tag) {
  const auto path = std::filesystem::temp_directory_path() /
                    ("gpumem-torch-" + std::string(tag) + "-" + std::to_string(getpid()) + ".so");
  std::filesystem::copy_file(GPUMEM_TORCH_LIB, path, std::filesystem::copy_options::overwrite_existing);
  return path.string();
}

adaptor& lib() {
  static adaptor a;  // one copy per process, as in PyTorch: its options live until first use
  return a;
}

TEST(TorchAdaptorConfig, EveryPoolOptionKeyIsTakenAndBadValuesAreRefusedByName) {
  adaptor& a = lib();
  ASSERT_NE(a.lib, nullptr) << dlerror();
  ASSERT_NE(a.configure, nullptr);
  ASSERT_NE(a.last_error, nullptr);
  EXPECT_EQ(a.configure("small_max_bytes=64K,max_reserved=8G,zero_on_free=0,initial_reserve=1G,"
                        "release_threshold=max,upstream=vmm"),
            0)
      << a.last_error();
  // The pool policy's settings are no keys: each is refused as unknown, by name.
  for (const char* bad : {"zero_on_free=2", "max_reserved_bytes=lots", "initial_reserve_bytes=much", "trace=",
                          "no_such_key=1", "upstream=floppy", "idle_budget=0.1", "grow_before_reclaim=1",
                          "front_cache=0", "front_cache_bytes=64M", "reserve_ceiling=1.03", "max_handle_bytes=8M",
                          "stream_ordered_moves=0", "remap_time_budget=0.02"}) {
    EXPECT_EQ(a.configure(bad), -2) << bad;
    const std::string why = a.last_error();
    const std::string key = std::string(bad).substr(0, std::string(bad).find('='));
    EXPECT_NE(why.find(key), std::string::npos) << bad << ": " << why;
  }
  // A trace path is taken (the file is opened only when the first pool is made).
  EXPECT_EQ(a.configure("trace=/tmp/gpumem-config-test-{pid}.csv"), 0) << a.last_error();
}

TEST(TorchAdaptorConfig, ErrorsNameTheFirstBadKeyOrValueAndWhatIsExpected) {
  adaptor& a = lib();
  ASSERT_NE(a.configure, nullptr) << dlerror();
  EXPECT_EQ(a.configure("zero_on_free=0,bogus=1,max_reserved=lots"), -2);
  std::string why = a.last_error();
  EXPECT_NE(why.find("unknown key 'bogus' (known: small_max_bytes, "), std::string::npos) << why;
  EXPECT_NE(why.find("upstream, trace)"), std::string::npos) << why;
  EXPECT_EQ(why.find("lots"), std::string::npos) << "only the first bad item: " << why;
  EXPECT_EQ(a.configure("max_reserved=x"), -2);
  EXPECT_EQ(std::string(a.last_error()),
            "gpumem_configure: bad value 'x' for key 'max_reserved': expected a byte size (a count with an optional "
            "K, M, G or T suffix, or max)");
  EXPECT_EQ(a.configure("upstream=floppy"), -2);
  EXPECT_EQ(std::string(a.last_error()),
            "gpumem_configure: bad value 'floppy' for key 'upstream': expected vmm, device or async");
  EXPECT_EQ(a.configure("zero_on_free"), -2);
  EXPECT_NE(std::string(a.last_error()).find("'zero_on_free' has no value"), std::string::npos) << a.last_error();
  // The variables GPUMEM_CONFIG replaced are gone: they are unknown keys there too.
  EXPECT_EQ(a.configure("GPUMEM_MAX_RESERVED=1G"), -2);
  EXPECT_NE(std::string(a.last_error()).find("unknown key 'gpumem_max_reserved'"), std::string::npos);
  EXPECT_EQ(a.configure(""), 0) << a.last_error();  // a good call lifts the refusal
}

// A refused gpumem_configure keeps the pool from starting (the allocation fails, saying why on
// stderr) until a call succeeds. Run in a child with a fresh copy, so no pool state leaks.
TEST(TorchAdaptorConfigDeathTest, RefusedConfigureStopsThePoolWithTheReasonOnStderr) {
  const std::string copy = fresh_copy("configure");
  EXPECT_EXIT(
      {
        unsetenv("GPUMEM_CONFIG");
        adaptor a(copy.c_str());
        if (!a.alloc_nothrow || a.configure("bogus=1") != -2) std::_Exit(3);
        if (a.alloc_nothrow(256, -1, nullptr) != nullptr) std::_Exit(4);
        if (std::string(a.last_error()).find("the pool does not start: gpumem_configure: unknown key 'bogus'") ==
            std::string::npos)
          std::_Exit(5);
        std::_Exit(0);
      },
      testing::ExitedWithCode(0), "gpumem: the pool does not start: gpumem_configure: unknown key 'bogus'");
  std::filesystem::remove(copy);
}

// GPUMEM_CONFIG with an unknown key is not dropped silently: configure reports it (Python raises
// ValueError with it), and the pool refuses to start, saying why on stderr.
TEST(TorchAdaptorConfigDeathTest, BadGpumemConfigStopsThePoolWithTheReasonOnStderr) {
  const std::string copy = fresh_copy("env");
  EXPECT_EXIT(
      {
        setenv("GPUMEM_CONFIG", "bogus=1,zero_on_free=0", 1);
        adaptor a(copy.c_str());
        if (!a.alloc_nothrow) std::_Exit(3);
        if (a.alloc_nothrow(256, -1, nullptr) != nullptr) std::_Exit(4);
        if (a.configure("zero_on_free=0") != -2) std::_Exit(5);  // a good call does not hide it
        if (std::string(a.last_error()).find("GPUMEM_CONFIG: unknown key 'bogus' (known: ") != 0) std::_Exit(6);
        std::_Exit(0);
      },
      testing::ExitedWithCode(0), "gpumem: the pool does not start: GPUMEM_CONFIG: unknown key 'bogus'");
  std::filesystem::remove(copy);
}

// The variables GPUMEM_CONFIG replaced are refused, saying where their option went.
TEST(TorchAdaptorConfigDeathTest, RemovedVariablesAreRefusedNamingTheirKey) {
  const std::string copy = fresh_copy("removed");
  EXPECT_EXIT(
      {
        unsetenv("GPUMEM_CONFIG");
        setenv("GPUMEM_MAX_RESERVED", "1G", 1);
        adaptor a(copy.c_str());
        if (!a.alloc_nothrow || a.configure("") != -2) std::_Exit(3);
        if (a.alloc_nothrow(256, -1, nullptr) != nullptr) std::_Exit(4);
        std::_Exit(0);
      },
      testing::ExitedWithCode(0), "GPUMEM_MAX_RESERVED is not read: set GPUMEM_CONFIG=max_reserved_bytes=VALUE");
  std::filesystem::remove(copy);
}
#else
TEST(TorchAdaptorConfig, EveryPoolOptionKeyIsTakenAndBadValuesAreRefusedByName) {
  GTEST_SKIP() << "libgpumem_torch.so is not built here (no CUDA toolkit, or a sanitizer build)";
}
#endif

}  // namespace
