// gpumem::pool on each CUDA upstream: the same typed suite runs over cudaMalloc segments, a
// cudaMemPool and the virtual-memory arena. Memory is proven real by writing and reading it back.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "gpu_test_support.hpp"
#include "gpumem/cuda/upstreams.hpp"
#include "gpumem/pool.hpp"

namespace gpumem::test {
namespace {

struct device_kind { static std::unique_ptr<upstream> make() { return std::make_unique<device_upstream>(); } };
struct async_kind { static std::unique_ptr<upstream> make() { return std::make_unique<async_upstream>(); } };
struct vmm_kind { static std::unique_ptr<upstream> make() { return std::make_unique<vmm_upstream>(); } };

template <class Kind>
class PoolOnGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    GPUMEM_REQUIRE_GPU();
    up_ = Kind::make();
    pool_ = std::make_unique<gpumem::pool>(*up_, ord_);
  }
  void TearDown() override {
    if (pool_) {
      EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      pool_->check_invariants();
      pool_.reset();
    }
  }
  std::unique_ptr<upstream> up_;
  cuda_ordering ord_;
  std::unique_ptr<gpumem::pool> pool_;
};

using upstream_kinds = ::testing::Types<device_kind, async_kind, vmm_kind>;
TYPED_TEST_SUITE(PoolOnGpu, upstream_kinds);

TYPED_TEST(PoolOnGpu, ManySizesAndAlignmentsAreRealAndAligned) {
  std::vector<std::size_t> sizes;
  for (std::size_t s = 256; s <= (std::size_t{64} << 20); s *= 4) {
    sizes.push_back(s);
    sizes.push_back(s + 100);  // not a size class
  }
  struct live { void* p; std::size_t bytes, align; unsigned char byte; };
  std::vector<live> blocks;
  unsigned char next = 1;
  for (std::size_t align = 256; align <= (std::size_t{2} << 20); align *= 8) {
    for (std::size_t bytes : sizes) {
      void* p = this->pool_->allocate(bytes, align, stream_ref{});
      ASSERT_NE(p, nullptr);
      ASSERT_EQ(reinterpret_cast<std::uintptr_t>(p) % align, 0u) << bytes << " B aligned " << align;
      GPUMEM_EXPECT_CUDA(cudaMemset(p, next, bytes));
      blocks.push_back({p, bytes, align, next++});
    }
  }
  // Every live block still holds its own byte at both ends: no two blocks overlap.
  for (const live& b : blocks) {
    unsigned char first = 0, last = 0;
    GPUMEM_EXPECT_CUDA(cudaMemcpy(&first, b.p, 1, cudaMemcpyDeviceToHost));
    GPUMEM_EXPECT_CUDA(cudaMemcpy(&last, static_cast<char*>(b.p) + b.bytes - 1, 1, cudaMemcpyDeviceToHost));
    EXPECT_EQ(first, b.byte);
    EXPECT_EQ(last, b.byte);
  }
  this->pool_->check_invariants();
  for (const live& b : blocks) this->pool_->deallocate(b.p, b.bytes, b.align, stream_ref{});
  const pool_stats st = this->pool_->stats();
  EXPECT_EQ(st.live_bytes, 0u);
  EXPECT_EQ(st.allocations, blocks.size());
  EXPECT_EQ(st.deallocations, blocks.size());
}

// A block freed on stream A while A still has a kernel writing it must not be handed to stream B
// before that kernel is done. If the pool broke that rule, A's late write would land on top of B's.
TYPED_TEST(PoolOnGpu, CrossStreamReuseWaitsForTheFreeingStream) {
  stream_holder a, b;
  const std::size_t bytes = std::size_t{1} << 20;
  int reused = 0;
  for (int round = 0; round < 4; ++round) {
    void* p = this->pool_->allocate(bytes, default_alignment, from_cuda_stream(a.s));
    slow_write(p, bytes, 0xAAAAAAAAu, 50.0, a.s);  // still running when we free
    this->pool_->deallocate(p, bytes, default_alignment, from_cuda_stream(a.s));
    void* q = this->pool_->allocate(bytes, default_alignment, from_cuda_stream(b.s));
    reused += q == p;
    GPUMEM_EXPECT_CUDA(cudaMemsetAsync(q, 0x55, bytes, b.s));
    GPUMEM_EXPECT_CUDA(cudaStreamSynchronize(b.s));
    GPUMEM_EXPECT_CUDA(cudaStreamSynchronize(a.s));
    std::vector<std::uint32_t> host(bytes / 4);
    GPUMEM_EXPECT_CUDA(cudaMemcpy(host.data(), q, bytes, cudaMemcpyDeviceToHost));
    std::size_t wrong = 0;
    for (std::uint32_t w : host) wrong += w != 0x55555555u;
    EXPECT_EQ(wrong, 0u) << "round " << round << ": stream B's data was overwritten by A's pending write";
    this->pool_->deallocate(q, bytes, default_alignment, from_cuda_stream(b.s));
  }
  this->RecordProperty("reused_across_streams", reused);
}

// Reuse on the same stream is immediate: stream order already protects it.
TYPED_TEST(PoolOnGpu, SameStreamReuseIsImmediate) {
  stream_holder a;
  const std::size_t bytes = std::size_t{256} << 10;
  void* p = this->pool_->allocate(bytes, default_alignment, from_cuda_stream(a.s));
  this->pool_->deallocate(p, bytes, default_alignment, from_cuda_stream(a.s));
  void* q = this->pool_->allocate(bytes, default_alignment, from_cuda_stream(a.s));
  EXPECT_EQ(p, q) << "a block freed on a stream should be reused on that stream at once";
  this->pool_->deallocate(q, bytes, default_alignment, from_cuda_stream(a.s));
}

TYPED_TEST(PoolOnGpu, TrimGivesMemoryBack) {
  const std::size_t bytes = std::size_t{32} << 20;
  void* p = this->pool_->allocate(bytes, default_alignment, stream_ref{});
  this->pool_->deallocate(p, bytes, default_alignment, stream_ref{});
  EXPECT_GE(this->pool_->stats().reserved_bytes, bytes);
  this->pool_->trim();
  EXPECT_LT(this->pool_->stats().reserved_bytes, bytes);
}

TYPED_TEST(PoolOnGpu, AbsurdRequestThrowsOutOfMemoryWithReport) {
  const std::size_t capacity = this->up_->capacity_bytes();
  ASSERT_GT(capacity, 0u);
  try {
    (void)this->pool_->allocate(capacity * 2, default_alignment, stream_ref{});
    FAIL() << "allocating twice the device's memory succeeded";
  } catch (const out_of_memory& e) {
    EXPECT_EQ(e.report().requested_bytes, capacity * 2);
  } catch (const std::invalid_argument&) {
    // also acceptable: the pool may call such a size absurd up front
  }
}

// pool_options::initial_reserve_bytes on the real device: held from construction, written and
// read back through blocks carved from it on two streams, with no upstream call after it.
TYPED_TEST(PoolOnGpu, InitialReserveIsRealMemoryThatServesWithoutGrowth) {
  pool_options po;
  po.initial_reserve_bytes = std::size_t{96} << 20;
  gpumem::pool p(*this->up_, this->ord_, po);
  const pool_stats start = p.stats();
  EXPECT_GE(start.reserved_bytes, po.initial_reserve_bytes);
  stream_holder a;
  const stream_ref streams[2] = {stream_ref{}, from_cuda_stream(a.s)};
  std::vector<void*> held;
  for (int i = 0; i < 8; ++i) {
    void* q = p.allocate(std::size_t{10} << 20, default_alignment, streams[i % 2]);
    GPUMEM_EXPECT_CUDA(cudaMemsetAsync(q, i + 1, std::size_t{10} << 20, to_cuda_stream(streams[i % 2])));
    held.push_back(q);
  }
  GPUMEM_EXPECT_CUDA(cudaDeviceSynchronize());
  for (int i = 0; i < 8; ++i) {
    unsigned char last = 0;
    GPUMEM_EXPECT_CUDA(cudaMemcpy(&last, static_cast<char*>(held[i]) + (std::size_t{10} << 20) - 1, 1,
                                  cudaMemcpyDeviceToHost));
    EXPECT_EQ(last, i + 1);
  }
  EXPECT_EQ(p.stats().upstream_calls, start.upstream_calls) << "80 MiB fits in the 96 MiB reserved";
  EXPECT_EQ(p.stats().reserved_bytes, start.reserved_bytes);
  p.check_invariants();
  for (int i = 0; i < 8; ++i) p.deallocate(held[i], std::size_t{10} << 20, default_alignment, streams[i % 2]);
  GPUMEM_EXPECT_CUDA(cudaDeviceSynchronize());
}

}  // namespace
}  // namespace gpumem::test
