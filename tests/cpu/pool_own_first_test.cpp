// The default policy's two options for jobs whose large tensors repeat: front_cache_peak_fraction
// (large blocks a thread's front cache keeps, as a share of its peak live bytes) and
// reclaim_own_first (a large request that finds nothing cached takes mapped memory, then the
// caller's own cached blocks, before it remaps idle granules). (pool_random_test.cpp runs both
// against the shadow model.)
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

#include "support/pool_model.hpp"
#include "support/moving_policy.hpp"

namespace {

using namespace gpumem;
using gpumem::test::MiB;
using gpumem::test::sim_pool_rig;

detail::pool_config options(double peak_fraction, bool own_first) {
  detail::pool_config po;
  gpumem::test::use_moving_policy(po);
  po.front_cache_peak_fraction = peak_fraction;
  po.reclaim_own_first = own_first;
  return po;
}

struct moved {
  std::uint64_t maps, unmaps;
};
moved moved_of(const pool_stats& s) { return {s.maps, s.unmaps}; }

// Four 64 MiB blocks A B C D side by side (peak live 256 MiB); A and C freed into the front cache
// (half the peak may stay there), B to the arena, where its granules are idle. A 128 MiB request
// then fits nowhere mapped as the arena sees it. Returns the granules mapped and unmapped for it.
moved granules_moved_for_a_request_over_cached_blocks(bool own_first) {
  sim_pool_rig r(sim_options{.capacity_bytes = std::size_t{1} << 30, .auto_complete = true}, options(0.5, own_first));
  void* a = r.allocate(64 * MiB, default_alignment, stream_ref{});
  void* b = r.allocate(64 * MiB, default_alignment, stream_ref{});
  void* c = r.allocate(64 * MiB, default_alignment, stream_ref{});
  void* d = r.allocate(64 * MiB, default_alignment, stream_ref{});
  r.deallocate(a, stream_ref{});
  r.deallocate(c, stream_ref{});
  r.deallocate(b, stream_ref{});
  const moved before = moved_of(r.p->stats());
  EXPECT_EQ(r.p->stats().reserved_bytes, 256 * MiB);
  void* e = r.allocate(128 * MiB, default_alignment, stream_ref{});
  const moved after = moved_of(r.p->stats());
  // Neither way grows: the tight reserve holds.
  EXPECT_EQ(r.p->stats().reserved_bytes, 256 * MiB);
  r.model->check_full();
  r.deallocate(e, stream_ref{});
  r.deallocate(d, stream_ref{});
  r.free_all_and_trim();
  return {after.maps - before.maps, after.unmaps - before.unmaps};
}

TEST(ReclaimOwnFirst, ARequestOverTheCallersCachedBlocksCostsNoDriverCall) {
  // Without it the arena first moves B's idle granules to a new place and only then, short of
  // more, empties the front caches; with it A and C go back first and A B C hold the request.
  const moved without = granules_moved_for_a_request_over_cached_blocks(false);
  EXPECT_GT(without.maps + without.unmaps, 0u);
  const moved with = granules_moved_for_a_request_over_cached_blocks(true);
  EXPECT_EQ(with.maps, 0u);
  EXPECT_EQ(with.unmaps, 0u);
}

TEST(FrontCachePeakFraction, LargeBlocksStayCachedUpToTheShareOfPeakAndNeverAddReserved) {
  // Live memory falls to nothing between two "steps"; the step's blocks come back and are served
  // from the front cache next time: no trip to the arena, so no allocation beyond the hits.
  for (const double fraction : {0.0, 1.0}) {
    sim_pool_rig r(sim_options{.capacity_bytes = std::size_t{1} << 30, .auto_complete = true}, options(fraction, false));
    void* step[4];
    for (int round = 0; round < 3; ++round) {
      for (auto& p : step) p = r.allocate(48 * MiB, default_alignment, stream_ref{});
      for (auto& p : step) r.deallocate(p, stream_ref{});
    }
    const pool_stats s = r.p->stats();
    EXPECT_EQ(s.reserved_bytes, 4 * 48 * MiB) << "fraction " << fraction;  // caching never grows the pool
    if (fraction > 0)
      EXPECT_EQ(s.front_hits, 8u) << "rounds 2 and 3 from the front cache";
    else
      EXPECT_LT(s.front_hits, 8u) << "32 MiB of front cache holds none of the 48 MiB blocks";
    r.model->check_full();
    r.free_all_and_trim();
  }
}

TEST(FrontCachePeakFraction, ANegativeFractionIsRefusedByName) {
  detail::pool_config po;
  gpumem::test::use_moving_policy(po);
  po.front_cache_peak_fraction = -1;
  try {
    gpumem::test::sim_pool_rig r(sim_options{.capacity_bytes = std::size_t{1} << 30}, po);
    FAIL() << "accepted a negative front_cache_peak_fraction";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("front_cache_peak_fraction"), std::string::npos) << e.what();
  }
}

}  // namespace
