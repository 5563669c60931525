// Data-integrity stress: 8 streams allocate from gpumem::pool, a kernel fills every new block with
// a pattern derived from (block id, stream), and before each free a kernel checks it and counts
// mismatching words. Any overlap between live blocks, reuse before the previous owner's work was
// done, or a bad mapping shows up as a mismatch. Zero are expected.
//
// Knob: GPUMEM_STRESS_BLOCKS (default 10^6 blocks). Sizes are log-uniform in [256 B, 64 MiB]; the
// live footprint is capped at 4 GiB. To keep 10^6 blocks fast, kernels touch only the first and
// last 4 KiB of a block plus one word per 64 KiB (test_kernels.cu).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <deque>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "gpu_test_support.hpp"
#include "gpumem/cuda/upstreams.hpp"
#include "gpumem/pool.hpp"

namespace gpumem::test {
namespace {

constexpr int stream_count = 8;
constexpr std::size_t live_cap_bytes = std::size_t{4} << 30;

std::uint64_t stress_blocks(std::uint64_t default_count) {
  if (const char* env = std::getenv("GPUMEM_STRESS_BLOCKS")) {
    char* end = nullptr;
    const unsigned long long n = std::strtoull(env, &end, 10);
    if (end && *end == '\0' && n > 0) return n;
    ADD_FAILURE() << "GPUMEM_STRESS_BLOCKS='" << env << "' is not a positive integer";
  }
  return default_count;
}

struct live_block {
  void* p;
  std::size_t bytes;
  std::size_t alignment;
  std::uint64_t tag;
  int stream;
};

template <class Make>
void run_stress(Make make_upstream, std::uint64_t blocks) {
  std::unique_ptr<upstream> up = make_upstream();
  cuda_ordering ord;
  pool_options opts;
  auto pool = std::make_unique<gpumem::pool>(*up, ord, opts);

  std::vector<std::unique_ptr<stream_holder>> streams;
  for (int i = 0; i < stream_count; ++i) streams.push_back(std::make_unique<stream_holder>());
  unsigned long long* mismatches = nullptr;
  ASSERT_EQ(cudaMalloc(&mismatches, sizeof(unsigned long long)), cudaSuccess);
  ASSERT_EQ(cudaMemset(mismatches, 0, sizeof(unsigned long long)), cudaSuccess);
  std::vector<cudaEvent_t> handoff(stream_count);
  for (auto& e : handoff) ASSERT_EQ(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), cudaSuccess);

  std::mt19937_64 rng(12345);
  std::uniform_real_distribution<double> log_size(std::log(256.0), std::log(double(64 << 20)));
  std::uniform_int_distribution<int> pick_stream(0, stream_count - 1);
  std::uniform_int_distribution<int> die(0, 15);
  std::deque<live_block> live;
  std::size_t live_bytes = 0;
  std::uint64_t cross_stream_frees = 0;

  auto release = [&](const live_block& b) {
    cudaStream_t owner = streams[b.stream]->s;
    check_pattern(b.p, b.bytes, b.tag, owner, mismatches);
    int free_on = b.stream;
    if (die(rng) == 0) {  // 1 in 16: free on another stream, ordered after the check by an event
      free_on = pick_stream(rng);
      if (free_on != b.stream) {
        ASSERT_EQ(cudaEventRecord(handoff[b.stream], owner), cudaSuccess);
        ASSERT_EQ(cudaStreamWaitEvent(streams[free_on]->s, handoff[b.stream], 0), cudaSuccess);
        ++cross_stream_frees;
      }
    }
    pool->deallocate(b.p, b.bytes, b.alignment, from_cuda_stream(streams[free_on]->s));
    live_bytes -= b.bytes;
  };

  const auto start = std::chrono::steady_clock::now();
  for (std::uint64_t id = 1; id <= blocks; ++id) {
    const std::size_t bytes = static_cast<std::size_t>(std::exp(log_size(rng)));
    const std::size_t alignment = die(rng) == 0 ? (std::size_t{256} << (id % 14)) : default_alignment;
    const int s = pick_stream(rng);
    while (!live.empty() && (live_bytes + bytes > live_cap_bytes || live.size() >= 512)) {
      // Free a random-ish old block: mostly the oldest, sometimes one in the middle, so holes form.
      const std::size_t at = die(rng) < 12 ? 0 : live.size() / 2;
      release(live[at]);
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(at));
    }
    void* p = pool->allocate(bytes, alignment, from_cuda_stream(streams[s]->s));
    ASSERT_EQ(reinterpret_cast<std::uintptr_t>(p) % alignment, 0u);
    const std::uint64_t tag = id * stream_count + std::uint64_t(s);
    fill_pattern(p, bytes, tag, streams[s]->s);
    live.push_back({p, bytes, alignment, tag, s});
    live_bytes += bytes;
    if (id % 4096 == 0) ASSERT_EQ(cudaGetLastError(), cudaSuccess) << "after block " << id;
  }
  while (!live.empty()) {
    release(live.front());
    live.pop_front();
  }
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  unsigned long long bad = 0;
  ASSERT_EQ(cudaMemcpy(&bad, mismatches, sizeof bad, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(bad, 0u) << "words that did not hold their block's pattern";
  const pool_stats st = pool->stats();
  EXPECT_EQ(st.live_bytes, 0u);
  EXPECT_EQ(st.allocations, blocks);
  pool->check_invariants();
  std::printf("[stress] %s: %llu blocks, %llu cross-stream frees, %.1f s, peak reserved %.1f MiB, "
              "peak live %.1f MiB, mismatches %llu\n",
              up->name().c_str(), static_cast<unsigned long long>(blocks),
              static_cast<unsigned long long>(cross_stream_frees), seconds,
              double(st.peak_reserved_bytes) / double(1 << 20), double(st.peak_live_bytes) / double(1 << 20), bad);
  pool.reset();
  for (auto& e : handoff) (void)cudaEventDestroy(e);
  (void)cudaFree(mismatches);
}

TEST(IntegrityStress, VmmUpstreamMillionBlocks) {
  GPUMEM_REQUIRE_GPU();
  run_stress([] { return std::make_unique<vmm_upstream>(); }, stress_blocks(1000000));
}

// The plain upstreams get a tenth: segment creation is the slow path they add.
TEST(IntegrityStress, DeviceUpstream) {
  GPUMEM_REQUIRE_GPU();
  run_stress([] { return std::make_unique<device_upstream>(); }, stress_blocks(1000000) / 10 + 1);
}

TEST(IntegrityStress, AsyncUpstream) {
  GPUMEM_REQUIRE_GPU();
  run_stress([] { return std::make_unique<async_upstream>(); }, stress_blocks(1000000) / 10 + 1);
}

}  // namespace
}  // namespace gpumem::test
