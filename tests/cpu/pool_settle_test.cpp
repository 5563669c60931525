// pool::settle: what the front caches keep and the empty slabs go back to the pool's free memory,
// nothing goes back to the device, live blocks stay live, memory freed on a stream whose work is
// still queued stays that stream's, and a job that settles where each step ends repeats its first
// step's layout — no growth after it.
#include <gtest/gtest.h>

#include <filesystem>
#include <set>
#include <utility>
#include <vector>

#include "gpumem/detail/pool_tuning.hpp"
#include "gpumem/pool.hpp"
#include "gpumem/replay.hpp"
#include "gpumem/sim_device.hpp"
#include "gpumem/trace.hpp"
#include "support/moving_policy.hpp"

namespace {

using namespace gpumem;
constexpr std::size_t MiB = std::size_t{1} << 20;

sim_options device(bool virtual_memory, bool auto_complete = true) {
  sim_options so;
  so.capacity_bytes = std::size_t{1} << 30;
  so.virtual_memory = virtual_memory;
  so.auto_complete = auto_complete;
  return so;
}

class Settle : public ::testing::TestWithParam<std::pair<bool, bool>> {};  // virtual upstream, grow first

TEST_P(Settle, GivesCachedBlocksToTheFreeMemoryAndNothingToTheDevice) {
  const auto [virtual_memory, grow_first] = GetParam();
  sim_device dev(device(virtual_memory));
  detail::pool_config po;
  gpumem::test::use_moving_policy(po);
  po.grow_before_reclaim = grow_first;
  pool p(dev.memory(), dev.streams(), po, po);
  std::vector<std::pair<void*, std::size_t>> kept, freed;
  std::size_t large_bytes = 0;
  for (int i = 0; i < 64; ++i) {
    const std::size_t bytes = (i % 4 == 0) ? (3 + i % 5) * MiB : 512 + 64 * std::size_t(i);
    if (i % 4 == 0) large_bytes += bytes;
    (i % 3 == 0 ? kept : freed).emplace_back(p.allocate(bytes, default_alignment, stream_ref{}), bytes);
  }
  for (auto [ptr, bytes] : freed) p.deallocate(ptr, bytes, default_alignment, stream_ref{});
  const pool_stats before = p.stats();
  ASSERT_GT(before.cached_bytes, 0u);

  p.settle();
  p.check_invariants();
  const pool_stats after = p.stats();
  EXPECT_EQ(after.reserved_bytes, before.reserved_bytes) << "settle gives nothing back to the device";
  EXPECT_EQ(after.unmaps, before.unmaps);
  EXPECT_EQ(after.upstream_calls, before.upstream_calls);
  EXPECT_EQ(after.live_bytes, before.live_bytes);
  // What the caches held is free memory of the pool now: one block can take all of it that is
  // contiguous, and the kept blocks are still live and still free cleanly afterwards.
  for (auto [ptr, bytes] : kept) p.deallocate(ptr, bytes, default_alignment, stream_ref{});
  p.check_invariants();
  EXPECT_EQ(p.stats().live_bytes, 0u);
  p.settle();
  p.check_invariants();
  // With nothing live, the pool's memory is free in one piece: all of it on a virtual upstream
  // (one address range) by default, a whole segment on a plain one, and growing first on a
  // virtual upstream all the large blocks' half (the slabs had the other: slab_zone_for), so at
  // least every large block ever allocated side by side. Taking it grows nothing.
  const pool_stats idle = p.stats();
  if (virtual_memory && grow_first) {
    EXPECT_GE(idle.largest_free_block_bytes, large_bytes);
  }
  const std::size_t whole_bytes =
      virtual_memory && !grow_first ? idle.reserved_bytes : idle.largest_free_block_bytes;
  EXPECT_GE(whole_bytes, 3 * MiB);
  void* whole = p.allocate(whole_bytes, default_alignment, stream_ref{});
  EXPECT_EQ(p.stats().reserved_bytes, idle.reserved_bytes);
  EXPECT_EQ(p.stats().upstream_calls, idle.upstream_calls);
  p.deallocate(whole, whole_bytes, default_alignment, stream_ref{});
  p.check_invariants();
}

INSTANTIATE_TEST_SUITE_P(Upstreams, Settle,
                         ::testing::Values(std::pair{true, false}, std::pair{true, true}, std::pair{false, false},
                                           std::pair{false, true}),
                         [](const auto& info) {
                           return std::string(info.param.first ? "Virtual" : "Plain") +
                                  (info.param.second ? "GrowFirst" : "Default");
                         });

// A block freed on stream A whose work has not run is A's until the clock says A ran past the free:
// settle moves it out of the front cache but not to another stream.
TEST(SettleStreams, MemoryFreedOnAStreamStillRunningIsNotHandedToAnother) {
  sim_device dev(device(true, false));  // the device finishes work only when told
  const stream_ref a = dev.create_stream(), b = dev.create_stream();
  pool p(dev.memory(), dev.streams(), {}, gpumem::test::moving_policy());
  std::set<void*> a_blocks;
  std::vector<void*> held;
  for (int i = 0; i < 32; ++i) {
    void* q = p.allocate(MiB, default_alignment, a);
    a_blocks.insert(q);
    held.push_back(q);
  }
  for (void* q : held) p.deallocate(q, MiB, default_alignment, a);
  p.settle();
  p.check_invariants();
  std::vector<void*> on_b;
  for (int i = 0; i < 32; ++i) {
    void* q = p.allocate(MiB, default_alignment, b);
    EXPECT_EQ(a_blocks.count(q), 0u) << "stream B got memory stream A freed before its work ran";
    on_b.push_back(q);
  }
  // A itself may reuse what it freed at once.
  void* again = p.allocate(MiB, default_alignment, a);
  EXPECT_EQ(a_blocks.count(again), 1u);
  p.deallocate(again, MiB, default_alignment, a);
  for (void* q : on_b) p.deallocate(q, MiB, default_alignment, b);
  dev.complete_all();
  p.check_invariants();
}

// Three passes of `t`, growing first under the arena's moving policy (what settle is for):
// without settle between them, then with it.
std::pair<replay_result, replay_result> replayed_without_and_with_settle(const trace& t) {
  detail::pool_tuning tuning = gpumem::test::moving_policy();
  tuning.grow_before_reclaim = true;
  replay_options o;
  o.passes = 3;
  o.tuning = &tuning;
  replay_result plain = replay(t, o);
  o.settle_between_passes = true;
  return {std::move(plain), replay(t, o)};
}

// The trace whose second pass grows without it: bert's, growing first, maps granules in its second
// pass that its first did not need. Settling between passes, every pass lands where the
// first did: not one granule mapped after it, and the first pass's reserve throughout.
TEST(SettleReplay, EveryPassRepeatsTheFirstOnBertsTrace) {
  const std::filesystem::path path = std::filesystem::path(GPUMEM_SHARED_TRACES) / "bert_infer_varlen.csv.gz";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "no shared trace at " << path;
  const trace t = read_trace(path);
  const auto [plain, settled] = replayed_without_and_with_settle(t);
  ASSERT_EQ(plain.pass_log.size(), 3u);
  ASSERT_EQ(settled.pass_log.size(), 3u);
  EXPECT_GT(plain.pass_log[1].driver_granules, plain.pass_log[0].driver_granules) << "the case settle is for";
  EXPECT_EQ(settled.pass_log[0].driver_granules, plain.pass_log[0].driver_granules) << "the first pass is the same";
  EXPECT_EQ(settled.pass_log[2].driver_granules, settled.pass_log[0].driver_granules);
  EXPECT_EQ(settled.peak_reserved_bytes, settled.reserved_after_first_pass_bytes);
  EXPECT_LT(settled.peak_reserved_bytes, plain.peak_reserved_bytes);
  EXPECT_EQ(settled.failed_allocs, 0u);
}

// The same on the example that ships with the project (what `gpumem replay --settle` once showed
// growing first): without settle the reserve grows after the first pass; with it, not at all.
TEST(SettleReplay, GrowingFirstTheVisionExampleKeepsItsFirstPassReserve) {
  const trace t = read_trace(std::filesystem::path(GPUMEM_EXAMPLES) / "vision_two_streams.csv");
  const auto [plain, settled] = replayed_without_and_with_settle(t);
  EXPECT_GT(plain.soak_growth, 0.0) << "the case settle is for";
  EXPECT_EQ(settled.soak_growth, 0.0);
  EXPECT_EQ(settled.failed_allocs, 0u);
}

}  // namespace
