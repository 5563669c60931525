// The guard over real device memory, through device_memory_access (cudaMemsetAsync /
// cudaMemcpyAsync on the caller's stream). Misuse is planted with CUDA calls, as a kernel would.
#include <cuda_runtime_api.h>
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "gpumem/errors.hpp"
#include "gpumem/guard.hpp"
#include "gpumem/memory_access.hpp"

namespace {

// A test-local cudaMalloc resource: the guard needs only the resource concept.
struct cuda_malloc_resource {
  void* allocate(std::size_t bytes, std::size_t, gpumem::stream_ref) {
    void* p = nullptr;
    if (cudaMalloc(&p, bytes) != cudaSuccess) throw std::bad_alloc();
    return p;
  }
  void deallocate(void* p, std::size_t, std::size_t, gpumem::stream_ref) noexcept { cudaFree(p); }
};
static_assert(gpumem::resource<cuda_malloc_resource>);

std::vector<gpumem::misuse_report>& recorded() {
  static std::vector<gpumem::misuse_report> r;
  return r;
}
void record(const gpumem::misuse_report& r) { recorded().push_back(r); }

class guard_gpu_test : public ::testing::Test {
 protected:
  void SetUp() override {
    int count = 0;
    const cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess) GTEST_SKIP() << "no CUDA device visible: " << cudaGetErrorString(err);
    if (count == 0) GTEST_SKIP() << "no CUDA device visible: cudaGetDeviceCount found 0";
    ASSERT_EQ(cudaStreamCreate(&stream_), cudaSuccess);
    recorded().clear();
    previous_ = gpumem::set_misuse_handler(&record);
    opts_.access = &gpumem::device_memory_access();
  }
  void TearDown() override {
    if (previous_) gpumem::set_misuse_handler(previous_);
    if (stream_) cudaStreamDestroy(stream_);
  }
  gpumem::stream_ref s() const { return gpumem::stream_ref{stream_}; }

  cuda_malloc_resource upstream_;
  gpumem::guard_options opts_;
  cudaStream_t stream_ = nullptr;
  gpumem::misuse_handler previous_ = nullptr;
};

}  // namespace

TEST_F(guard_gpu_test, clean_sequence_reports_nothing) {
  {
    gpumem::guard g(upstream_, opts_);
    for (std::size_t bytes : {1u, 255u, 4096u, 1u << 20}) {
      void* p = g.allocate(bytes, 256, s());
      ASSERT_EQ(cudaMemsetAsync(p, 0x11, bytes, stream_), cudaSuccess);  // every owned byte
      g.deallocate(p, bytes, 256, s());
    }
    EXPECT_EQ(g.check_poison(), 0u);
  }
  EXPECT_TRUE(recorded().empty()) << gpumem::describe(recorded().front());
}

TEST_F(guard_gpu_test, overrun_by_one_byte_on_device) {
  gpumem::guard g(upstream_, opts_);
  auto* p = static_cast<unsigned char*>(g.allocate(1000, 256, s()));
  ASSERT_EQ(cudaMemsetAsync(p + 1000, 0x00, 1, stream_), cudaSuccess);  // ordered before the free
  g.deallocate(p, 1000, 256, s());
  ASSERT_EQ(recorded().size(), 1u);
  const auto& r = recorded().front();
  EXPECT_EQ(r.kind, gpumem::misuse_kind::buffer_overrun);
  EXPECT_NE(r.detail.find(fmt::format("{}", static_cast<void*>(p)) + " (1000 bytes)"),
            std::string::npos)
      << r.detail;
  EXPECT_NE(r.detail.find("offset 1000"), std::string::npos) << r.detail;
}

TEST_F(guard_gpu_test, write_after_free_on_device) {
  gpumem::guard g(upstream_, opts_);
  auto* p = static_cast<unsigned char*>(g.allocate(512, 256, s()));
  g.deallocate(p, 512, 256, s());
  ASSERT_EQ(cudaMemsetAsync(p + 7, 0x2a, 3, stream_), cudaSuccess);  // after the free
  EXPECT_EQ(g.check_poison(), 1u);
  ASSERT_EQ(recorded().size(), 1u);
  const auto& r = recorded().front();
  EXPECT_EQ(r.kind, gpumem::misuse_kind::use_after_free);
  EXPECT_NE(r.detail.find("offset 7 is 0x2a"), std::string::npos) << r.detail;
  EXPECT_NE(r.detail.find("3 of"), std::string::npos) << r.detail;
}

TEST_F(guard_gpu_test, double_free_on_device_never_reaches_cudaFree) {
  gpumem::guard g(upstream_, opts_);
  void* p = g.allocate(64, 256, s());
  g.deallocate(p, 64, 256, s());
  g.deallocate(p, 64, 256, s());
  ASSERT_EQ(recorded().size(), 1u);
  EXPECT_EQ(recorded().front().kind, gpumem::misuse_kind::double_free);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}
