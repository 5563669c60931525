// Growing first, a front cache may keep the large blocks its thread freed since its peak while the
// pool's reserved memory is within front_cache_reserve_headroom over peak live (pool.cpp,
// within_headroom and grown_budget). A training step frees its activations just when live bytes
// fall, and asks for the same shapes in the next step: with a budget that follows live bytes
// alone, most of those frees went back to the arena and most of the next step's requests to the
// pool's lock (resnet's trace: half its large requests). Past the headroom the budget is the share
// of live again, so caching cannot keep raising reserved memory.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "front_cache.hpp"
#include "support/model_check.hpp"
#include "support/pool_model.hpp"

namespace {

using namespace gpumem;
using gpumem::test::expect_model_holds;
using gpumem::test::sim_pool_rig;
using gpumem::test::KiB;
using gpumem::test::MiB;

// Sixteen shapes of 4-8 MiB, 96 MiB in all: far more than the 8 MiB the front cache keeps by
// itself, or a quarter of live bytes once the step has freed them.
std::vector<std::size_t> step_shapes() {
  std::vector<std::size_t> v;
  for (std::size_t k = 0; k < 16; ++k) v.push_back(4 * MiB + k * 256 * KiB + 256);
  return v;
}

// One step: every shape asked for at once, then all freed, oldest first. Returns the front
// cache's hits in it.
std::uint64_t run_step(sim_pool_rig& r) {
  const std::uint64_t before = r.p->stats().front_hits;
  std::vector<void*> held;
  for (std::size_t n : step_shapes()) held.push_back(r.allocate(n, default_alignment, stream_ref{}));
  const std::uint64_t hits = r.p->stats().front_hits - before;
  for (void* p : held) r.deallocate(p, stream_ref{});
  return hits;
}

std::unique_ptr<sim_pool_rig> rig(double headroom) {
  detail::pool_config po;
  po.grow_before_reclaim = true;
  po.front_cache_bytes = 8 * MiB;
  po.front_cache_reserve_headroom = headroom;
  return std::make_unique<sim_pool_rig>(sim_options{.capacity_bytes = std::size_t{1} << 30, .auto_complete = true},
                                        po);
}

TEST(ReserveHeadroom, AStepsFreedBlocksServeTheNextStep) {
  auto r = rig(0.1);
  EXPECT_EQ(run_step(*r), 0u) << "the first step finds nothing cached";
  const pool_stats first = r->p->stats();
  for (int step = 0; step < 5; ++step) EXPECT_EQ(run_step(*r), 16u) << "step " << step + 2;
  const pool_stats later = r->p->stats();
  EXPECT_EQ(later.front_evictions, first.front_evictions) << "nothing had to make room";
  EXPECT_EQ(later.peak_reserved_bytes, first.peak_reserved_bytes) << "the later steps took no new memory";
  expect_model_holds(*r);
  r->free_all_and_trim();
}

TEST(ReserveHeadroom, OffTheShareOfLiveRules) {
  // The same steps with the headroom off: the budget (8 MiB, as a quarter of live bytes is less
  // by the time most blocks come back) keeps only the last shapes freed.
  auto r = rig(0.0);
  run_step(*r);
  const std::uint64_t hits = run_step(*r);
  EXPECT_LE(hits, 2u);
  EXPECT_GT(r->p->stats().front_evictions, 0u);
  expect_model_holds(*r);
  r->free_all_and_trim();
}

TEST(ReserveHeadroom, PastTheHeadroomTheShareOfLiveRules) {
  auto r = rig(0.1);
  // 256 MiB reserved, then the peaks reset: reserved is now far over peak live, as after a job's
  // large phase (a block over the cache's budget goes straight back to the arena).
  r->deallocate(r->allocate(256 * MiB, default_alignment, stream_ref{}), stream_ref{});
  r->p->reset_peaks();
  run_step(*r);  // carved from the free 256 MiB: peak live 96 MiB, reserved still 256 MiB
  ASSERT_GT(static_cast<double>(r->p->stats().reserved_bytes), 1.1 * 96.0 * MiB);
  EXPECT_LE(run_step(*r), 2u) << "past the headroom the front cache keeps no more than without it";
  expect_model_holds(*r);
  r->free_all_and_trim();
}

// Eight blocks of one 24 MiB shape a step; growing first its bin keeps 3 (bin_limit_for).
std::uint64_t hits_on_one_shape(double headroom) {
  detail::pool_config po;
  po.grow_before_reclaim = true;
  po.front_cache_bytes = std::size_t{1} << 30;  // the budget is no limit here: the bin is
  po.front_cache_reserve_headroom = headroom;
  sim_pool_rig r(sim_options{.capacity_bytes = std::size_t{2} << 30, .auto_complete = true}, po);
  auto step = [&] {
    const std::uint64_t before = r.p->stats().front_hits;
    std::vector<void*> held;
    for (int k = 0; k < 8; ++k) held.push_back(r.allocate(24 * MiB + 256, default_alignment, stream_ref{}));
    const std::uint64_t hits = r.p->stats().front_hits - before;
    for (void* p : held) r.deallocate(p, stream_ref{});
    return hits;
  };
  step();
  const std::uint64_t hits = step();
  r.model->check_full();
  r.free_all_and_trim();
  return hits;
}

TEST(ReserveHeadroom, AFullBinWidensOnce) {
  ASSERT_EQ(detail::bin_limit_for(24 * MiB + 256, true), 3u);
  EXPECT_EQ(hits_on_one_shape(0.0), 3u) << "without the headroom the bin keeps its limit";
  EXPECT_EQ(hits_on_one_shape(0.1), 6u) << "within it, twice the limit, and no more";
}

TEST(ReserveHeadroom, TheDefaultPolicyIsUnchanged) {
  // By default caching never adds reserved memory (the front caches are emptied before the pool
  // grows), and the large blocks' budget is front_cache_bytes: the headroom does not apply.
  detail::pool_config po;
  po.front_cache_bytes = 8 * MiB;
  sim_pool_rig r(sim_options{.capacity_bytes = std::size_t{1} << 30, .auto_complete = true}, po);
  run_step(r);
  EXPECT_LE(run_step(r), 2u);
  expect_model_holds(r);
  r.free_all_and_trim();
}

TEST(ReserveHeadroom, ANegativeOrNanHeadroomIsRefusedByName) {
  for (double bad : {-0.1, std::nan("")}) {
    detail::pool_config po;
    po.front_cache_reserve_headroom = bad;
    try {
      sim_pool_rig r(sim_options{.capacity_bytes = std::size_t{1} << 30}, po);
      ADD_FAILURE() << "accepted front_cache_reserve_headroom " << bad;
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("front_cache_reserve_headroom"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
