// Pitfall 1 of the seed text, proven on the GPU: a block freed on one stream is never handed to
// another stream before the freeing stream's work — or, with record_use, every using stream's
// work — has finished. Each case runs against gpumem (data intact) and against a deliberately
// unsafe allocator of the test's own that reuses freed memory at once on any stream (data
// corrupted), so the test is known to bite.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "gpu_test_support.hpp"
#include "gpumem/cuda/gpu_pool.hpp"

namespace {

using gpumem::stream_ref;
using gpumem::test::stream_holder;

constexpr std::size_t kWords = std::size_t{1} << 20;  // 4 MiB
constexpr std::uint32_t kPattern = 0x600DF00Du;

__global__ void fill_words(std::uint32_t* p, std::size_t n, std::uint32_t v) {
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < n; i += std::size_t{gridDim.x} * blockDim.x)
    p[i] = v;
}

// Spins for `cycles` clock ticks, then reads every word: a long kernel still reading when its
// block is freed. Counts the words that are not `expect`.
__global__ void slow_read(const std::uint32_t* p, std::size_t n, std::uint32_t expect, long long cycles,
                          unsigned long long* wrong) {
  const long long start = clock64();
  while (clock64() - start < cycles) {
  }
  unsigned long long bad = 0;
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < n; i += std::size_t{gridDim.x} * blockDim.x)
    bad += p[i] != expect;
  if (bad) atomicAdd(wrong, bad);
}

// The unsafe policy: one freed block kept and handed to the next request on any stream at once.
struct unsafe_reuse {
  void* cached = nullptr;
  std::size_t bytes = 0;
  void* allocate(std::size_t n, stream_ref) {
    if (cached && bytes == n) return std::exchange(cached, nullptr);
    void* p = nullptr;
    if (cudaMalloc(&p, n) != cudaSuccess) return nullptr;
    return p;
  }
  void deallocate(void* p, std::size_t n, stream_ref) {
    if (cached) cudaFree(cached);
    cached = p;
    bytes = n;
  }
  ~unsafe_reuse() {
    cudaDeviceSynchronize();
    if (cached) cudaFree(cached);
  }
};

struct gpumem_policy {
  gpumem::gpu_pool pool;
  void* allocate(std::size_t n, stream_ref s) { return pool.allocate(n, 256, s); }
  void deallocate(void* p, std::size_t n, stream_ref s) { pool.deallocate(p, n, 256, s); }
  void record_use(void* p, stream_ref s) { pool.pool().record_use(p, s); }
};

// pool::settle right after every free: the block leaves the front cache for the arena's free
// memory at once, where it must still be A's (or C's, with record_use) until their work is done.
struct gpumem_settling_policy : gpumem_policy {
  void deallocate(void* p, std::size_t n, stream_ref s) {
    gpumem_policy::deallocate(p, n, s);
    pool.settle();
  }
};

stream_ref ref(cudaStream_t s) { return stream_ref{s}; }

long long cycles_for_ms(double ms) {
  int khz = 0;
  cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, 0);
  return static_cast<long long>(ms * khz);
}

// The issue's scenario: a long kernel on A reads the block; the block is freed on A right after
// the launch; B allocates the same size and writes it. Returns the words A's kernel saw changed.
template <class Policy>
unsigned long long read_while_other_stream_writes(Policy& policy, bool use_third_stream_reader) {
  stream_holder a, b, c;
  unsigned long long* wrong = nullptr;
  EXPECT_EQ(cudaMalloc(&wrong, sizeof *wrong), cudaSuccess);
  EXPECT_EQ(cudaMemset(wrong, 0, sizeof *wrong), cudaSuccess);
  const std::size_t bytes = kWords * 4;
  auto* p = static_cast<std::uint32_t*>(policy.allocate(bytes, ref(a.s)));
  fill_words<<<256, 256, 0, a.s>>>(p, kWords, kPattern);
  cudaStream_t reader = use_third_stream_reader ? c.s : a.s;
  if (use_third_stream_reader) {
    // The reader runs on C after the fill: C waits for A, and the pool is told C uses the block.
    cudaEvent_t filled;
    cudaEventCreateWithFlags(&filled, cudaEventDisableTiming);
    cudaEventRecord(filled, a.s);
    cudaStreamWaitEvent(c.s, filled);
    cudaEventDestroy(filled);
    if constexpr (requires { policy.record_use(p, stream_ref{}); }) policy.record_use(p, ref(c.s));
  }
  slow_read<<<8, 256, 0, reader>>>(p, kWords, kPattern, cycles_for_ms(100.0), wrong);
  policy.deallocate(p, bytes, ref(a.s));
  auto* q = static_cast<std::uint32_t*>(policy.allocate(bytes, ref(b.s)));
  fill_words<<<256, 256, 0, b.s>>>(q, kWords, 0xBAD0BAD0u);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  unsigned long long host = 0;
  EXPECT_EQ(cudaMemcpy(&host, wrong, sizeof host, cudaMemcpyDeviceToHost), cudaSuccess);
  policy.deallocate(q, bytes, ref(b.s));
  cudaFree(wrong);
  return host;
}

TEST(CrossStreamSafety, GpumemKeepsAFreedBlockFromAnotherStreamUntilTheReaderIsDone) {
  GPUMEM_REQUIRE_GPU();
  gpumem_policy g;
  EXPECT_EQ(read_while_other_stream_writes(g, false), 0u) << "gpumem handed a block to stream B too early";
}

TEST(CrossStreamSafety, SettleKeepsAFreedBlockFromAnotherStreamUntilTheReaderIsDone) {
  GPUMEM_REQUIRE_GPU();
  gpumem_settling_policy g;
  EXPECT_EQ(read_while_other_stream_writes(g, false), 0u) << "after settle, stream B got the block too early";
  gpumem_settling_policy h;
  EXPECT_EQ(read_while_other_stream_writes(h, true), 0u) << "after settle, record_use(p, C) did not hold the block";
}

TEST(CrossStreamSafety, TheUnsafePolicyCorruptsTheSameScenario) {
  GPUMEM_REQUIRE_GPU();
  unsafe_reuse u;
  EXPECT_GT(read_while_other_stream_writes(u, false), 0u)
      << "the unsafe policy did not corrupt: the scenario cannot tell safe from unsafe";
}

TEST(CrossStreamSafety, RecordUseKeepsTheBlockUntilEveryUsingStreamIsDone) {
  GPUMEM_REQUIRE_GPU();
  gpumem_policy g;
  EXPECT_EQ(read_while_other_stream_writes(g, true), 0u) << "record_use(p, C) did not hold the block for C";
}

TEST(CrossStreamSafety, WithoutRecordUseAReaderOnAThirdStreamIsNotProtected) {
  GPUMEM_REQUIRE_GPU();
  unsafe_reuse u;  // the same hazard as a pool never told about stream C
  EXPECT_GT(read_while_other_stream_writes(u, true), 0u);
}

}  // namespace
