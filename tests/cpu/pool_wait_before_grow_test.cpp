// pool_tuning::wait_before_grow: on a GPU the host runs ahead of the device, so memory freed on a
// stream whose work has not yet reached the free cannot be unmapped and moved; without waiting the
// tight policy grows beside it. The simulated device here completes nothing until told (or until
// the host waits), as a GPU running behind.
#include <gtest/gtest.h>

#include <filesystem>

#include "gpumem/detail/pool_tuning.hpp"
#include "gpumem/replay.hpp"
#include "gpumem/trace.hpp"
#include "support/pool_model.hpp"
#include "support/moving_policy.hpp"

namespace {

using namespace gpumem;
using gpumem::test::MiB;
using gpumem::test::sim_pool_rig;

// A rig whose device completes nothing until told, with wait_before_grow as given. Stream-ordered
// moves are off: with them the pending memory below is moved without a wait
// (pool_stream_ordered_moves_test.cpp), and the wait would not be reached.
sim_pool_rig lagging_rig(bool wait) {
  detail::pool_config po;
  gpumem::test::use_moving_policy(po);
  po.wait_before_grow = wait;
  po.stream_ordered_moves = false;
  return sim_pool_rig(sim_options{.capacity_bytes = std::size_t{1} << 30}, po);
}

// A 64 MiB block freed on stream s (its work still pending), a 2 MiB block live above it, then a
// 96 MiB request on s: A's run is too small, so the request lands above and needs 48 granules.
// Returns peak reserved.
std::size_t peak_reserved_with_pending_free(bool wait) {
  sim_pool_rig r = lagging_rig(wait);
  const stream_ref s = r.dev->create_stream();
  void* a = r.allocate(64 * MiB, default_alignment, s);
  void* pin = r.allocate(2 * MiB, default_alignment, s);
  r.deallocate(a, s);  // s has not run past this free: A stays busy
  void* c = r.allocate(96 * MiB, default_alignment, s);
  r.model->check_full();
  const std::size_t peak = r.p->stats().peak_reserved_bytes;
  r.deallocate(c, s);
  r.deallocate(pin, s);
  r.dev->complete_all();
  r.free_all_and_trim();
  return peak;
}

TEST(WaitBeforeGrow, PendingFreesAreWaitedForAndMovedRatherThanGrownBeside) {
  // Without the wait: A's 64 MiB cannot move, so 96 more are created (162 MiB for 98 live).
  EXPECT_EQ(peak_reserved_with_pending_free(false), 162 * MiB);
  // With it: the host waits for s, A's granules go idle and are moved under the request; only
  // the missing 32 MiB are created.
  EXPECT_EQ(peak_reserved_with_pending_free(true), 98 * MiB);
}

TEST(WaitBeforeGrow, NothingPendingMeansNoWaitAndGrowthAsBefore) {
  sim_pool_rig r = lagging_rig(true);
  const stream_ref s = r.dev->create_stream();
  void* a = r.allocate(64 * MiB, default_alignment, s);
  void* b = r.allocate(64 * MiB, default_alignment, s);
  EXPECT_EQ(r.p->stats().reserved_bytes, 128 * MiB);
  EXPECT_EQ(r.p->stats().events_recorded, 0u);  // no free: nothing to wait for, no event
  r.deallocate(a, s);
  r.deallocate(b, s);
  r.dev->complete_all();
  r.free_all_and_trim();
}

// The example inference trace on a device that finishes its queued work only every 50
// operations (replay_options::device_lag_ops): the tight policy's reserve gives way without the
// wait and holds with it.
double fragmentation_of_varlen(std::size_t lag, bool wait) {
  const trace t = read_trace(std::filesystem::path(GPUMEM_EXAMPLES) / "varlen_inference.csv");
  detail::pool_tuning tuning;
  gpumem::test::use_moving_policy(tuning);
  tuning.wait_before_grow = wait;
  tuning.stream_ordered_moves = false;
  replay_options o;
  o.device_lag_ops = lag;
  o.tuning = &tuning;
  const replay_result r = replay(t, o);
  EXPECT_EQ(r.failed_allocs, 0u);
  return r.fragmentation;
}

TEST(WaitBeforeGrow, ALaggingDeviceLoosensTheReserveAndWaitingHoldsIt) {
  const double keeps_up = fragmentation_of_varlen(0, false);
  const double lagging = fragmentation_of_varlen(50, false);
  const double waiting = fragmentation_of_varlen(50, true);
  EXPECT_LT(keeps_up, 1.03);
  EXPECT_GT(lagging, keeps_up + 0.1) << "memory freed on a stream still running cannot move";
  EXPECT_LT(waiting, 1.03);
}

}  // namespace
