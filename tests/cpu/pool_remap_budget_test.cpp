// pool_tuning::remap_time_budget: moving idle granules (unmap here, map there) keeps the reserve
// tight and costs tens of µs per granule on a GPU; the budget bounds the host time spent on it.
// These tests step the budget's clock by hand and charge a modeled 1 ms per granule moved, so
// what is allowed when is exact. (pool_random_test.cpp runs the budget against the shadow model.)
#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <stdexcept>
#include <vector>

#include "gpumem/detail/pool_tuning.hpp"
#include "gpumem/replay.hpp"
#include "gpumem/trace.hpp"
#include "support/pool_model.hpp"

namespace {

using namespace gpumem;
using gpumem::test::MiB;
using gpumem::test::sim_pool_rig;

std::atomic<std::uint64_t> clock_ns{0};

// Front caches off: freed blocks go straight to the arena, where their granules turn idle.
detail::pool_config options(double budget) {
  detail::pool_config po;
  po.front_cache = false;
  po.remap_time_budget = budget;
  po.remap_cost_ns_per_granule = 1e6;
  po.remap_clock_ns = [] { return clock_ns.load(); };
  return po;
}

struct figures {
  std::size_t reserved;
  std::uint64_t unmaps, deferred;
};
figures figures_of(const pool_stats& s) { return {s.reserved_bytes, s.unmaps, s.remaps_deferred}; }

// A 64 MiB, a 2 MiB pin, B 64 MiB, a 2 MiB pin (132 MiB reserved). A freed, then C (96 MiB) fits
// no hole: it lands above, on 48 granules, 32 of them A's moved (+16 granules: 164 MiB). B freed,
// then D (96 MiB) the same, with B's 32 granules there to move. Returns the figures after C and
// after D, and what is still live.
struct two_requests {
  figures after_c, after_d;
  std::vector<void*> live;
};
two_requests run_two_requests(sim_pool_rig& r) {
  void* a = r.allocate(64 * MiB, default_alignment, stream_ref{});
  void* p1 = r.allocate(2 * MiB, default_alignment, stream_ref{});
  void* b = r.allocate(64 * MiB, default_alignment, stream_ref{});
  void* p2 = r.allocate(2 * MiB, default_alignment, stream_ref{});
  EXPECT_EQ(r.p->stats().reserved_bytes, 132 * MiB);
  r.deallocate(a, stream_ref{});
  void* c = r.allocate(96 * MiB, default_alignment, stream_ref{});
  const figures after_c = figures_of(r.p->stats());
  r.deallocate(b, stream_ref{});
  void* d = r.allocate(96 * MiB, default_alignment, stream_ref{});
  const figures after_d = figures_of(r.p->stats());
  r.model->check_full();
  return {after_c, after_d, {c, d, p1, p2}};
}

void free_all(sim_pool_rig& r, const std::vector<void*>& live) {
  for (void* p : live) r.deallocate(p, stream_ref{});
  r.free_all_and_trim();
}

TEST(RemapTimeBudget, WithoutOneEveryMoveIsMadeAndTheReserveStaysTight) {
  clock_ns = 0;
  sim_pool_rig r(sim_options{.capacity_bytes = std::size_t{1} << 30, .auto_complete = true}, options(0.0));
  const two_requests t = run_two_requests(r);
  EXPECT_EQ(t.after_c.unmaps, 32u);
  EXPECT_EQ(t.after_c.reserved, 164 * MiB);
  EXPECT_EQ(t.after_d.unmaps, 64u);
  EXPECT_EQ(t.after_d.reserved, 196 * MiB);  // B's 32 granules moved, 16 new
  EXPECT_EQ(t.after_d.deferred, 0u);
  EXPECT_EQ(r.p->stats().remap_ns, 0u);  // no budget: nothing is charged
  free_all(r, t.live);
}

TEST(RemapTimeBudget, ASpentBudgetGrowsInsteadOfMovingUntilTimeRepaysIt) {
  clock_ns = 0;
  sim_pool_rig r(sim_options{.capacity_bytes = std::size_t{1} << 30, .auto_complete = true}, options(0.01));
  const two_requests t = run_two_requests(r);
  // C: the bucket starts empty but not in debt, so A's 32 granules move (64 ms charged: 32
  // unmapped, 32 mapped again).
  EXPECT_EQ(t.after_c.unmaps, 32u);
  EXPECT_EQ(t.after_c.reserved, 164 * MiB);
  // D: no time has passed (the clock stands but for the modeled cost, 1% of which came back):
  // B's granules stay where they are and D's 48 are new.
  EXPECT_EQ(t.after_d.unmaps, 32u);
  EXPECT_EQ(t.after_d.reserved, 260 * MiB);
  EXPECT_GT(t.after_d.deferred, 0u);
  EXPECT_EQ(r.p->stats().remap_ns, 64'000'000u);
  // 100 s later (1 s of budget, capped at 10 ms: the debt repaid): E (128 MiB, 64 granules above
  // D) takes B's 32 idle granules again and grows by 32 only (388 MiB had it grown by all 64).
  clock_ns = 100'000'000'000ull;
  void* e = r.allocate(128 * MiB, default_alignment, stream_ref{});
  EXPECT_EQ(r.p->stats().unmaps, 64u);
  EXPECT_EQ(r.p->stats().reserved_bytes, 324 * MiB);
  r.model->check_full();
  r.deallocate(e, stream_ref{});
  free_all(r, t.live);
}

TEST(RemapTimeBudget, NearTheDevicesLimitASpentBudgetStillMoves) {
  // 200 MiB of device: D cannot grow by 96 MiB (164 + 96 > 200), so B's granules move after all —
  // the budget trades memory for time only while there is memory to trade.
  clock_ns = 0;
  sim_pool_rig r(sim_options{.capacity_bytes = 200 * MiB, .auto_complete = true}, options(0.01));
  const two_requests t = run_two_requests(r);
  EXPECT_EQ(t.after_c.unmaps, 32u);
  EXPECT_GT(t.after_d.unmaps, 32u);  // growth to the limit, then B's granules
  EXPECT_LE(t.after_d.reserved, 200 * MiB);
  free_all(r, t.live);
}

TEST(RemapTimeBudget, BadValuesAreRefused) {
  sim_device dev(sim_options{.capacity_bytes = std::size_t{1} << 30});
  for (double bad : {-0.1, 1.5}) {
    detail::pool_config po;
    po.remap_time_budget = bad;
    EXPECT_THROW(pool(dev.memory(), dev.streams(), po, po), std::invalid_argument) << bad;
  }
  detail::pool_config po;
  po.remap_cost_ns_per_granule = -1;
  EXPECT_THROW(pool(dev.memory(), dev.streams(), po, po), std::invalid_argument);
}

// The example inference trace, 36 µs charged per granule moved (a GPU's cost): a budget of 5 %
// of the replay's time moves a fraction of the granules the unbounded pool moves, and every
// request is still served.
TEST(RemapTimeBudget, OnAVaryingShapeTraceTheBudgetCutsTheMoves) {
  const trace t = read_trace(std::filesystem::path(GPUMEM_EXAMPLES) / "varlen_inference.csv");
  auto run = [&](double budget) {
    detail::pool_tuning tuning;
    tuning.remap_time_budget = budget;
    tuning.remap_cost_ns_per_granule = 36e3;
    replay_options o;
    o.tuning = &tuning;
    const replay_result r = replay(t, o);
    EXPECT_EQ(r.failed_allocs, 0u);
    return r.stats;
  };
  const pool_stats free_hand = run(0.0), bounded = run(0.05);
  ASSERT_GT(free_hand.maps + free_hand.unmaps, 0u);
  EXPECT_LT(bounded.unmaps, free_hand.unmaps);
  EXPECT_GT(bounded.remaps_deferred, 0u);
  EXPECT_GE(bounded.peak_reserved_bytes, free_hand.peak_reserved_bytes);
}

}  // namespace
