// Stream-ordered moves on a real GPU (pool_tuning::stream_ordered_moves): memory freed on stream A
// while a kernel of A still writes it is mapped a second time under A's next request. A's queued
// kernel must finish through the old mapping (the pool unmaps it only after), A's next work must
// see the memory after it, and stream B must get neither place's memory meanwhile.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "gpu_test_support.hpp"
#include "gpumem/cuda/upstreams.hpp"
#include "gpumem/detail/pool_tuning.hpp"
#include "gpumem/pool.hpp"

namespace gpumem::test {
namespace {

constexpr std::size_t MiB = std::size_t{1} << 20;

std::size_t words_not(const void* p, std::size_t bytes, std::uint32_t want) {
  std::vector<std::uint32_t> host(bytes / 4);
  if (cudaMemcpy(host.data(), p, bytes, cudaMemcpyDeviceToHost) != cudaSuccess) return SIZE_MAX;
  std::size_t wrong = 0;
  for (std::uint32_t w : host) wrong += w != want;
  return wrong;
}

TEST(StreamOrderedMovesOnGpu, PendingMemoryMovesUnderItsOwnStreamAndNoOtherStreamSeesIt) {
  GPUMEM_REQUIRE_GPU();
  vmm_upstream up;
  cuda_ordering ord;
  detail::pool_config po;
  po.stream_ordered_moves = true;
  po.idle_budget = 0;      // the tightest moving policy: growth only where nothing can move
  po.reserve_ceiling = 0;
  po.step_plan = false;
  gpumem::pool p(up, ord, po, po);
  stream_holder a, b;
  const stream_ref sa = from_cuda_stream(a.s), sb = from_cuda_stream(b.s);

  void* old_block = p.allocate(64 * MiB, default_alignment, sa);
  void* pin = p.allocate(2 * MiB, default_alignment, sa);  // keeps the 96 MiB request off A's run
  slow_write(old_block, 64 * MiB, 0xAAAAAAAAu, 150.0, a.s);  // still queued when we free
  p.deallocate(old_block, 64 * MiB, default_alignment, sa);
  void* moved = p.allocate(96 * MiB, default_alignment, sa);
  const pool_stats st = p.stats();
  if (st.stream_ordered_moves < 32u) {
    // (A's slow write must end before the pool, and the memory under it, go away.)
    GPUMEM_EXPECT_CUDA(cudaStreamSynchronize(a.s));
    FAIL() << "the request did not take A's pending memory: nothing here is tested";
  }
  EXPECT_LE(st.reserved_bytes, 98 * MiB + 2 * MiB) << "A's memory is counted once";
  GPUMEM_EXPECT_CUDA(cudaMemsetAsync(moved, 0x55, 96 * MiB, a.s));  // after the slow write, in A's order

  // B, meanwhile: its memory must be neither A's old place nor A's moved memory.
  void* other = p.allocate(64 * MiB, default_alignment, sb);
  GPUMEM_EXPECT_CUDA(cudaMemsetAsync(other, 0x77, 64 * MiB, b.s));

  GPUMEM_EXPECT_CUDA(cudaStreamSynchronize(a.s));
  GPUMEM_EXPECT_CUDA(cudaStreamSynchronize(b.s));
  GPUMEM_EXPECT_CUDA(cudaGetLastError());
  EXPECT_EQ(words_not(moved, 96 * MiB, 0x55555555u), 0u) << "A's memset after its slow write did not stick";
  EXPECT_EQ(words_not(other, 64 * MiB, 0x77777777u), 0u) << "stream B's memory was written by A's work";

  p.deallocate(moved, 96 * MiB, default_alignment, sa);
  p.deallocate(other, 64 * MiB, default_alignment, sb);
  p.deallocate(pin, 2 * MiB, default_alignment, sa);
  p.trim();  // waits for both streams: A's old place is unmapped, everything given back
  p.check_invariants();
  EXPECT_EQ(p.stats().reserved_bytes, 0u);
  EXPECT_EQ(up.physical_bytes(), 0u);
}

}  // namespace
}  // namespace gpumem::test
