// The standalone CUDA resources' contracts, one test group each.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "gpu_test_support.hpp"
#include "gpumem/cuda/async_resource.hpp"
#include "gpumem/cuda/device_resource.hpp"
#include "gpumem/cuda/gpu_pool.hpp"
#include "gpumem/cuda/host_registration.hpp"
#include "gpumem/cuda/managed_resource.hpp"
#include "gpumem/cuda/pinned_host_resource.hpp"
#include "gpumem/cuda/upstreams.hpp"

namespace gpumem::test {
namespace {

// Writes `bytes` of `value` through the device and reads them back.
void expect_device_round_trip(void* p, std::size_t bytes, int value) {
  GPUMEM_EXPECT_CUDA(cudaMemset(p, value, bytes));
  std::vector<unsigned char> host(bytes);
  GPUMEM_EXPECT_CUDA(cudaMemcpy(host.data(), p, bytes, cudaMemcpyDeviceToHost));
  for (unsigned char c : host) ASSERT_EQ(c, static_cast<unsigned char>(value));
}

TEST(DeviceResource, AllocatesRealMemoryAndRefusesWithOutOfMemory) {
  GPUMEM_REQUIRE_GPU();
  device_resource r;
  void* p = r.allocate(1 << 20);
  ASSERT_NE(p, nullptr);
  expect_device_round_trip(p, 1 << 20, 0x3C);
  r.deallocate(p, 1 << 20);
  EXPECT_THROW((void)r.allocate(std::size_t{1} << 50), out_of_memory);  // a PiB
  EXPECT_THROW((void)r.allocate(1024, 4096), std::invalid_argument);    // over cudaMalloc's 256 B
  EXPECT_THROW((void)r.allocate(1024, 384), std::invalid_argument);     // not a power of two
  // The error was cleared: the next call works.
  void* q = r.allocate(4096);
  EXPECT_NE(q, nullptr);
  r.deallocate(q, 4096);
}

TEST(AsyncResource, StreamOrderedAllocationAndStats) {
  GPUMEM_REQUIRE_GPU();
  async_pool_options o;
  o.reuse_allow_opportunistic = false;
  async_resource r(o);
  stream_holder s;
  const std::size_t bytes = std::size_t{8} << 20;
  void* p = r.allocate(bytes, default_alignment, from_cuda_stream(s.s));
  GPUMEM_EXPECT_CUDA(cudaMemsetAsync(p, 7, bytes, s.s));
  GPUMEM_EXPECT_CUDA(cudaStreamSynchronize(s.s));
  const async_pool_stats live = r.stats();
  EXPECT_GE(live.used_bytes, bytes);
  EXPECT_GE(live.reserved_bytes, bytes);
  r.deallocate(p, bytes, default_alignment, from_cuda_stream(s.s));
  GPUMEM_EXPECT_CUDA(cudaStreamSynchronize(s.s));
  EXPECT_EQ(r.stats().used_bytes, 0u);
  r.trim(0);
  EXPECT_EQ(r.stats().reserved_bytes, 0u) << "trim(0) with nothing live should give everything back";
  async_resource copy = r;
  EXPECT_TRUE(copy == r);
  EXPECT_FALSE(async_resource() == r);
}

TEST(AsyncResource, ThroughCcclInterface) {
  GPUMEM_REQUIRE_GPU();
  async_resource r;
  stream_holder s;
  void* p = r.allocate_async(4096, 256, ::cuda::stream_ref{s.s});
  ASSERT_NE(p, nullptr);
  r.deallocate_async(p, 4096, 256, ::cuda::stream_ref{s.s});
  GPUMEM_EXPECT_CUDA(cudaStreamSynchronize(s.s));
}

TEST(ManagedResource, HostAndDeviceSeeTheSameBytesAfterPrefetch) {
  GPUMEM_REQUIRE_GPU();
  managed_resource r;
  const std::size_t bytes = std::size_t{4} << 20;
  auto* p = static_cast<unsigned char*>(r.allocate(bytes));
  std::memset(p, 0x11, bytes);  // touched on the host first
  int device = 0;
  GPUMEM_EXPECT_CUDA(cudaGetDevice(&device));
  advise(p, bytes, cudaMemAdviseSetPreferredLocation, device);
  prefetch(p, bytes, device);
  GPUMEM_EXPECT_CUDA(cudaMemset(p, 0x22, bytes));
  prefetch(p, bytes, cudaCpuDeviceId);
  GPUMEM_EXPECT_CUDA(cudaDeviceSynchronize());
  EXPECT_EQ(p[0], 0x22);
  EXPECT_EQ(p[bytes - 1], 0x22);
  r.deallocate(p, bytes);
}

TEST(PinnedHostResource, CapErrorSaysWhatIsPinnedAndTheCap) {
  GPUMEM_REQUIRE_GPU();
  const std::size_t before = pinned_bytes_total();
  pinned_host_resource r(before + (std::size_t{8} << 20));  // room for 8 MiB more
  void* a = r.allocate(std::size_t{6} << 20);
  EXPECT_EQ(pinned_bytes_total(), before + (std::size_t{6} << 20));
  std::memset(a, 1, std::size_t{6} << 20);  // host memory
  try {
    (void)r.allocate(std::size_t{4} << 20);
    FAIL() << "allocation past the pinned cap succeeded";
  } catch (const out_of_memory& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find(std::to_string(before + (std::size_t{6} << 20))), std::string::npos) << what;
    EXPECT_NE(what.find(std::to_string(r.cap_bytes())), std::string::npos) << what;
    EXPECT_EQ(e.report().limit_bytes, r.cap_bytes());
  }
  EXPECT_EQ(pinned_bytes_total(), before + (std::size_t{6} << 20)) << "a refused request must not count";
  r.deallocate(a, std::size_t{6} << 20);
  EXPECT_EQ(pinned_bytes_total(), before);
  EXPECT_GT(default_pinned_cap_bytes(), 0u);
  EXPECT_EQ(default_pinned_cap_bytes(), physical_ram_bytes() / 5);
}

TEST(HostRegistration, DoubleRegisterIsAClearErrorAndMoveKeepsOneOwner) {
  GPUMEM_REQUIRE_GPU();
  const std::size_t bytes = std::size_t{1} << 20;
  void* raw = std::aligned_alloc(4096, bytes);
  ASSERT_NE(raw, nullptr);
  {
    host_registration reg(raw, bytes);
    EXPECT_TRUE(reg);
    try {
      host_registration again(raw, bytes);
      FAIL() << "registering the same range twice succeeded";
    } catch (const cuda_error& e) {
      EXPECT_EQ(e.code(), static_cast<int>(cudaErrorHostMemoryAlreadyRegistered));
      EXPECT_NE(std::string(e.what()).find("already registered"), std::string::npos) << e.what();
    }
    host_registration moved(std::move(reg));
    EXPECT_FALSE(reg);  // NOLINT(bugprone-use-after-move): the moved-from state is the contract
    EXPECT_EQ(moved.data(), raw);
    // The range is usable for DMA while registered.
    void* dev = nullptr;
    GPUMEM_EXPECT_CUDA(cudaMalloc(&dev, bytes));
    GPUMEM_EXPECT_CUDA(cudaMemset(dev, 0x5A, bytes));
    GPUMEM_EXPECT_CUDA(cudaMemcpy(raw, dev, bytes, cudaMemcpyDeviceToHost));
    EXPECT_EQ(static_cast<unsigned char*>(raw)[bytes - 1], 0x5A);
    (void)cudaFree(dev);
    host_registration assigned;
    assigned = std::move(moved);
    EXPECT_FALSE(moved);  // NOLINT(bugprone-use-after-move)
    EXPECT_TRUE(assigned);
  }
  // All owners are gone: the range was unregistered exactly once, so registering it works again.
  {
    host_registration fresh(raw, bytes);
    EXPECT_TRUE(fresh);
  }
  std::free(raw);
  EXPECT_THROW(host_registration(nullptr, 16), std::invalid_argument);
}

TEST(GpuPool, ServesThroughBothInterfaces) {
  GPUMEM_REQUIRE_GPU();
  gpu_pool p;
  stream_holder s;
  void* a = p.allocate(std::size_t{3} << 20, 4096, from_cuda_stream(s.s));
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(a) % 4096, 0u);
  void* b = p.allocate_async(1000, 256, ::cuda::stream_ref{s.s});
  GPUMEM_EXPECT_CUDA(cudaMemsetAsync(a, 1, std::size_t{3} << 20, s.s));
  GPUMEM_EXPECT_CUDA(cudaMemsetAsync(b, 2, 1000, s.s));
  // (bytes, stream) with the cudaStream_t itself, and a CCCL stream_ref brought across.
  void* c = p.allocate(2000, s.s);
  GPUMEM_EXPECT_CUDA(cudaMemsetAsync(c, 3, 2000, s.s));
  p.deallocate(c, 2000, cccl::to_stream_ref(::cuda::stream_ref{s.s}));
  EXPECT_EQ(cccl::to_cuda_stream_ref(from_cuda_stream(s.s)).get(), s.s);
  p.deallocate_async(b, 1000, 256, ::cuda::stream_ref{s.s});
  p.deallocate(a, std::size_t{3} << 20, 4096, from_cuda_stream(s.s));
  GPUMEM_EXPECT_CUDA(cudaStreamSynchronize(s.s));
  EXPECT_EQ(p.stats().live_bytes, 0u);
  EXPECT_EQ(p.memory().name(), "cuda-vmm");
  gpu_pool copy = p;
  EXPECT_TRUE(copy == p);
}

// gpu_pool forwards inline through a pool pointer it keeps beside the shared state: a copy, and an
// object moved from (a move copies), still reach the one pool, and a block goes back through any.
TEST(GpuPool, CopiesAndMovedFromObjectsShareThePool) {
  GPUMEM_REQUIRE_GPU();
  gpu_pool p;
  gpu_pool moved_to = std::move(p);
  EXPECT_TRUE(moved_to == p);
  EXPECT_EQ(&moved_to.pool(), &p.pool());
  void* a = p.allocate(4096);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(moved_to.stats().live_bytes, 4096u);
  moved_to.deallocate(a, 4096);
  EXPECT_EQ(p.stats().live_bytes, 0u);
  gpu_pool assigned;
  assigned = moved_to;
  EXPECT_TRUE(assigned == p);
}

TEST(VmmUpstream, MapsUnmapsAndRemapsPhysicalMemory) {
  GPUMEM_REQUIRE_GPU();
  vmm_upstream up;
  const std::size_t g = up.granularity();
  ASSERT_GT(g, 0u);
  void* range = up.reserve_range(4 * g);
  auto h = up.create_physical(g);
  ASSERT_TRUE(h.has_value());
  up.map(range, g, *h);
  GPUMEM_EXPECT_CUDA(cudaMemset(range, 0x77, g));
  GPUMEM_EXPECT_CUDA(cudaDeviceSynchronize());
  up.unmap(range, g);
  // The same physical granule under another address keeps its bytes: no copy, no new memory.
  void* elsewhere = static_cast<char*>(range) + 2 * g;
  up.map(elsewhere, g, *h);
  unsigned char c = 0;
  GPUMEM_EXPECT_CUDA(cudaMemcpy(&c, static_cast<char*>(elsewhere) + g - 1, 1, cudaMemcpyDeviceToHost));
  EXPECT_EQ(c, 0x77);
  EXPECT_EQ(up.mapped_bytes(), g);
  up.unmap(elsewhere, g);
  up.release_physical(*h, g);
  EXPECT_EQ(up.physical_bytes(), 0u);
  up.release_range(range, 4 * g);
  EXPECT_FALSE(up.create_physical(std::size_t{1} << 50).has_value()) << "a PiB must be refused, not thrown";
}

TEST(CudaOrdering, EventsCompleteOnlyAfterTheWork) {
  GPUMEM_REQUIRE_GPU();
  cuda_ordering ord;
  stream_holder a, b;
  void* p = nullptr;
  GPUMEM_EXPECT_CUDA(cudaMalloc(&p, 4096));
  slow_write(p, 4096, 1, 100.0, a.s);
  const event_ref e = ord.record(from_cuda_stream(a.s));
  EXPECT_FALSE(ord.query(e)) << "event completed while a 100 ms kernel was still running";
  ord.stream_wait(from_cuda_stream(b.s), e);
  GPUMEM_EXPECT_CUDA(cudaMemsetAsync(p, 0, 4096, b.s));  // must land after the slow write
  ord.synchronize(e);
  EXPECT_TRUE(ord.query(e));
  GPUMEM_EXPECT_CUDA(cudaStreamSynchronize(b.s));
  std::uint32_t w = 1;
  GPUMEM_EXPECT_CUDA(cudaMemcpy(&w, p, 4, cudaMemcpyDeviceToHost));
  EXPECT_EQ(w, 0u);
  ord.release(e);
  const event_ref e2 = ord.record(from_cuda_stream(b.s));
  EXPECT_EQ(ord.events_created(), 1u) << "a released event should be recycled";
  ord.synchronize(e2);
  ord.release(e2);
  (void)cudaFree(p);
}

TEST(CudaErrors, CarryTheCallTheCodeAndItsName) {
  GPUMEM_REQUIRE_GPU();
  async_pool_options bad;
  bad.device = 9999;
  try {
    async_resource r(bad);
    FAIL() << "an async pool on device 9999 was created";
  } catch (const cuda_error& e) {
    EXPECT_NE(e.code(), 0);
    EXPECT_FALSE(e.call().empty());
    EXPECT_NE(std::string(e.what()).find("cudaErrorInvalidDevice"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace gpumem::test
