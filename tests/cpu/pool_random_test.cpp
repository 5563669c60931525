// A long randomized sequence against the shadow model: log-uniform sizes 1 B .. 64 MiB, random
// power-of-two alignments up to 2 MiB, 4 simulated streams, frees in random order (sometimes on
// another stream), record_use, stream completion, trim, and out-of-memory under a small capacity.
// Cheap checks after every step, the O(blocks) ones every 1000 steps. 16 configurations x 300,000
// operations = 4.8 million per run; GPUMEM_RANDOM_OPS overrides the count per configuration.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <string>
#include <vector>

#include "support/pool_model.hpp"

namespace {

using namespace gpumem;
using gpumem::test::rng;
using gpumem::test::sim_pool_rig;

struct cfg {
  const char* name;
  bool virtual_memory;
  std::size_t small_max;
  std::size_t release_threshold;
  std::uint64_t seed;
  double idle_budget = 0.0;
  std::size_t max_handle_bytes = 0;  // 0: the policy's choice
  bool grow_first = false;
  double peak_fraction = 0.0;  // front_cache_peak_fraction
  bool own_first = false;      // reclaim_own_first
  double remap_budget = 0.0;   // remap_time_budget, on a clock of 500 ns per step, 36 µs per granule moved
  bool ordered_moves = true;   // stream_ordered_moves
  double reserve_ceiling = 0.0;
};

// The remap budget's clock in these runs: the step count, so a run is the same every time.
std::atomic<std::uint64_t> step_clock_ns{0};

std::uint64_t ops_per_config() {
  if (const char* e = std::getenv("GPUMEM_RANDOM_OPS")) return std::strtoull(e, nullptr, 10);
  return 300000;
}

class RandomSequence : public ::testing::TestWithParam<cfg> {};

TEST_P(RandomSequence, ModelAndInvariantsHoldAfterEveryStep) {
  const cfg& c = GetParam();
  detail::pool_config po;
  po.small_max_bytes = c.small_max;
  po.release_threshold_bytes = c.release_threshold;
  po.idle_budget = c.idle_budget;
  po.max_handle_bytes = c.max_handle_bytes;
  po.grow_before_reclaim = c.grow_first;
  po.front_cache_peak_fraction = c.peak_fraction;
  po.reclaim_own_first = c.own_first;
  po.remap_time_budget = c.remap_budget;
  po.stream_ordered_moves = c.ordered_moves;
  po.reserve_ceiling = c.reserve_ceiling;
  po.remap_cost_ns_per_granule = 36e3;
  po.remap_clock_ns = [] { return step_clock_ns.load(); };
  step_clock_ns = 0;
  sim_pool_rig r(sim_options{.capacity_bytes = std::size_t{1} << 30, .virtual_memory = c.virtual_memory}, po);
  stream_ref streams[4];
  for (auto& s : streams) s = r.dev->create_stream();
  rng g(c.seed);
  struct held { void* p; stream_ref s; };
  std::vector<held> live;
  std::uint64_t allocs = 0, frees = 0, ooms = 0, uses = 0, completes = 0, trims = 0;
  const std::uint64_t n = ops_per_config();
  std::uint64_t step = 0;
  try {
    for (; step < n; ++step) {
      step_clock_ns = step * 500;
      const auto op = g.below(1000);
      if (op < 520 && live.size() < 160) {
        const std::size_t bytes = gpumem::test::log_uniform(g.next(), g.next(), 1, std::size_t{64} << 20);
        const std::size_t align = g.chance(70) ? default_alignment : std::size_t{1} << g.below(22);
        const stream_ref s = streams[g.below(4)];
        try {
          live.push_back({r.allocate(bytes, align, s), s});
          ++allocs;
        } catch (const out_of_memory&) {
          ++ooms;
        }
      } else if (op < 960 && !live.empty()) {
        const auto i = g.below(live.size());
        const stream_ref s = g.chance(80) ? live[i].s : streams[g.below(4)];
        r.deallocate(live[i].p, s);
        live[i] = live.back();
        live.pop_back();
        ++frees;
      } else if (op < 975 && !live.empty()) {
        const auto& h = live[g.below(live.size())];
        const stream_ref s = streams[g.below(4)];
        r.p->record_use(h.p, s);
        r.model->on_record_use(h.p, s);
        ++uses;
      } else if (op < 999) {
        r.dev->complete(streams[g.below(4)]);
        ++completes;
      } else {
        r.p->trim();
        ++trims;
      }
      r.model->check_stats();
      if (step % 1000 == 999) r.model->check_full();
    }
    r.free_all_and_trim();
  } catch (const std::exception& e) {
    FAIL() << "step " << step << " (seed " << c.seed << "): " << e.what();
  }
  EXPECT_EQ(r.dev->used_bytes(), 0u);
  EXPECT_EQ(r.p->stats().reserved_bytes, 0u);
  EXPECT_GT(allocs, n / 4);
  std::printf("[ random   ] %s: %llu ops: %llu allocs, %llu frees, %llu OOM, %llu record_use, %llu complete, %llu trim; "
              "peak reserved/live %.3f; %llu moves deferred; %llu granules moved in stream order\n",
              c.name, (unsigned long long)n, (unsigned long long)allocs, (unsigned long long)frees,
              (unsigned long long)ooms, (unsigned long long)uses, (unsigned long long)completes,
              (unsigned long long)trims, r.p->stats().fragmentation(),
              (unsigned long long)r.p->stats().remaps_deferred, (unsigned long long)r.p->stats().stream_ordered_moves);
}

constexpr std::size_t keep_all = SIZE_MAX;
INSTANTIATE_TEST_SUITE_P(
    Pool, RandomSequence,
    ::testing::Values(cfg{"Virtual", true, 64 << 10, keep_all, 1}, cfg{"VirtualNoSlabs", true, 0, keep_all, 2},
                      cfg{"VirtualRelease0", true, 64 << 10, 0, 3}, cfg{"VirtualIdleBudget", true, 64 << 10, keep_all, 7, 0.5},
                      // Handles of several granules: moved whole, given back whole, released when
                      // too large for the run that needs memory (1 GiB of device: OOM is common).
                      cfg{"VirtualHandles8M", true, 64 << 10, keep_all, 8, 0.0, 8 << 20},
                      cfg{"VirtualHandles8MRelease0", true, 64 << 10, 0, 9, 0.0, 8 << 20},
                      cfg{"VirtualGrowFirst", true, 64 << 10, keep_all, 10, 0.0, 0, true},
                      // Large front caches and the caller's own blocks before remapping.
                      cfg{"VirtualPeakCacheOwnFirst", true, 64 << 10, keep_all, 11, 0.0, 0, false, 1.0, true},
                      cfg{"VirtualPeakCacheOwnFirstRelease0", true, 64 << 10, 0, 12, 0.0, 0, false, 1.0, true},
                      // Moves bounded by time: growth instead while the budget is spent, moves
                      // again (and near the device's limit, always) when it is not.
                      cfg{"VirtualRemapBudget", true, 64 << 10, keep_all, 13, 0.0, 0, false, 0.0, false, 0.02},
                      cfg{"VirtualRemapBudgetRelease0", true, 64 << 10, 0, 14, 0.0, 0, false, 0.0, false, 0.02},
                      // Memory a stream freed stays where it is until that stream is past the
                      // free (the policy before stream-ordered moves).
                      cfg{"VirtualNoOrderedMoves", true, 64 << 10, keep_all, 15, 0.0, 0, false, 0.0, false, 0.0, false},
                      // A large idle budget under a reserve ceiling: idle memory kept, then moved
                      // whenever growing would pass 1.05x peak live.
                      cfg{"VirtualIdleBudgetCeiling", true, 64 << 10, keep_all, 16, 0.5, 0, false, 0.0, false, 0.0, true, 1.05},
                      cfg{"Segments", false, 64 << 10, keep_all, 4},
                      cfg{"SegmentsNoSlabs", false, 0, keep_all, 5}, cfg{"SegmentsRelease0", false, 64 << 10, 0, 6}),
    [](const auto& info) { return std::string(info.param.name); });

}  // namespace
