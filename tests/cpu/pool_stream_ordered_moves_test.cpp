// pool_tuning::stream_ordered_moves: memory stream S freed while its work is still queued is
// mapped a second time under S's next request, instead of growing beside it; its old place
// retires and is unmapped once S has run past the frees there. The simulated device here
// completes nothing until told, as a GPU running behind the host. The shadow model follows every
// handle's places (spy_upstream::aliases): a handout whose memory is also mapped where another
// stream's work may still run fails the test, as does an unmap under pending work.
#include <gtest/gtest.h>

#include <filesystem>
#include <optional>
#include <vector>

#include "gpumem/detail/pool_tuning.hpp"
#include "gpumem/replay.hpp"
#include "gpumem/trace.hpp"
#include "support/pool_model.hpp"
#include "support/moving_policy.hpp"

namespace {

using namespace gpumem;
using gpumem::test::MiB;
using gpumem::test::sim_pool_rig;

sim_pool_rig lagging_rig(bool moves, std::size_t max_reserved = SIZE_MAX) {
  detail::pool_config po;
  gpumem::test::use_moving_policy(po);
  po.stream_ordered_moves = moves;
  po.max_reserved_bytes = max_reserved;
  return sim_pool_rig(sim_options{.capacity_bytes = std::size_t{1} << 30}, po);
}

// A (64 MiB) freed on `free_on` with its work pending, a 2 MiB block live above it, then a 96 MiB
// request on `s`: A's run is too small, so the request lands above and needs 48 granules.
struct pending_scene {
  sim_pool_rig r;
  stream_ref s, t;
  void* a = nullptr;
  void* pin = nullptr;
  void* c = nullptr;
  pending_scene(bool moves, bool free_on_other) : r(lagging_rig(moves)) {
    s = r.dev->create_stream();
    t = r.dev->create_stream();
    a = r.allocate(64 * MiB, default_alignment, s);
    pin = r.allocate(2 * MiB, default_alignment, s);
    r.deallocate(a, free_on_other ? t : s);
    c = r.allocate(96 * MiB, default_alignment, s);
    r.model->check_full();
  }
};

TEST(StreamOrderedMoves, TheStreamsOwnPendingMemoryIsMovedNotGrownBeside) {
  pending_scene x(true, false);
  const pool_stats st = x.r.p->stats();
  // A's 32 granules are mapped under the request and only 16 are created: 98 MiB for 98 live.
  // (The pool's first attempt may not grow: it marks A's granules, finds 16 missing and fails,
  // and must put what it marked back as s's free memory for the attempt that may grow — else A
  // would sit unusable until s ran past, and the pool would grow beside it.)
  EXPECT_EQ(st.peak_reserved_bytes, 98 * MiB);
  EXPECT_EQ(st.stream_ordered_moves, 32u);
  EXPECT_EQ(x.r.dev->used_bytes(), 98 * MiB) << "physical memory is counted once, not at both places";
  // Nothing was waited for: the device still has not run past the free.
  EXPECT_GT(x.r.dev->events_pending(), 0u);
  x.r.deallocate(x.c, x.s);
  x.r.deallocate(x.pin, x.s);
  x.r.dev->complete_all();
  x.r.free_all_and_trim();
}

// Nothing moved: the request grew beside A (162 MiB for 98 live).
void expect_grown_beside(bool moves, bool free_on_other) {
  pending_scene x(moves, free_on_other);
  EXPECT_EQ(x.r.p->stats().peak_reserved_bytes, 162 * MiB);
  EXPECT_EQ(x.r.p->stats().stream_ordered_moves, 0u);
  x.r.dev->complete_all();
  x.r.free_all_and_trim();
}

TEST(StreamOrderedMoves, OffTheTightPolicyGrowsBeside) { expect_grown_beside(false, false); }

// Freed on t, whose work is pending: s's request must not take it, at either place.
TEST(StreamOrderedMoves, MemoryAnotherStreamFreedIsNeverMoved) { expect_grown_beside(true, true); }

TEST(StreamOrderedMoves, AnotherStreamGetsNeitherPlaceUntilTheStreamRanPast) {
  pending_scene x(true, false);
  // While s's work is pending, t's 64 MiB cannot be A's old place (retiring) nor its memory
  // (now under c): it is new memory. The model checks both places of every handle.
  void* d = x.r.allocate(64 * MiB, default_alignment, x.t);
  EXPECT_EQ(x.r.p->stats().reserved_bytes, 162 * MiB);
  x.r.model->check_full();
  x.r.deallocate(d, x.t);
  // s runs past the free: A's old place is unmapped — 32 granules, and no map — and what the
  // pool holds is live memory and d's.
  x.r.dev->complete_all();
  const pool_stats before = x.r.p->stats();
  x.r.p->trim();
  x.r.model->check_full();
  const pool_stats after = x.r.p->stats();
  EXPECT_GE(after.unmaps, before.unmaps + 32) << "the retiring place was not unmapped";
  EXPECT_EQ(after.maps, before.maps);
  EXPECT_EQ(after.reserved_bytes, 98 * MiB) << "trim keeps only c and pin";
  x.r.deallocate(x.c, x.s);
  x.r.deallocate(x.pin, x.s);
  x.r.free_all_and_trim();
}

// The cached block of the pool that starts at `a`, if any.
std::optional<block_info> cached_at(const pool& p, const void* a) {
  for (const block_info& b : p.blocks())
    if (b.address == reinterpret_cast<std::uintptr_t>(a) && b.st == block_info::state::cached) return b;
  return std::nullopt;
}

TEST(StreamOrderedMoves, TheRestOfAGranuleMovedMemoryLandsOnIsTheStreamsUntilItRanPast) {
  // Two 40 MiB blocks freed on s, work pending (each above a live 2 MiB one), then 41 MiB on s:
  // neither fits, so it lands above and needs 21 granules, its last one half covered. All 21 are
  // moved memory — the edge granule too — and the MiB of it the request leaves is s's free memory
  // (at once for s, not before s ran past for anyone else): that memory may still be in use at its
  // old place.
  sim_pool_rig r = lagging_rig(true);
  const stream_ref s = r.dev->create_stream(), t = r.dev->create_stream();
  void* a1 = r.allocate(40 * MiB, default_alignment, s);
  void* pin1 = r.allocate(2 * MiB, default_alignment, s);
  void* a2 = r.allocate(40 * MiB, default_alignment, s);
  void* pin2 = r.allocate(2 * MiB, default_alignment, s);
  r.deallocate(a1, s);
  r.deallocate(a2, s);
  void* c = r.allocate(41 * MiB, default_alignment, s);
  r.model->check_full();
  EXPECT_EQ(r.p->stats().stream_ordered_moves, 21u);
  EXPECT_EQ(r.p->stats().peak_reserved_bytes, 84 * MiB) << "nothing grown for c";
  void* rest = static_cast<char*>(c) + 41 * MiB;
  const std::optional<block_info> held = cached_at(*r.p, rest);
  ASSERT_TRUE(held.has_value()) << "the edge granule's rest is not a free block";
  EXPECT_EQ(held->bytes, MiB);
  EXPECT_EQ(held->stream, s) << "the edge granule's rest is free for every stream while s's work is pending";
  // Another stream's requests never land there (the model checks every handout against both
  // places of its memory)...
  std::vector<void*> on_t;
  for (int i = 0; i < 8; ++i) on_t.push_back(r.allocate(MiB, default_alignment, t));
  r.model->check_full();
  // ...and once s has run past, it is everyone's.
  r.dev->complete_all();
  r.p->trim();
  r.model->check_full();
  for (void* p : on_t) r.deallocate(p, t);
  for (void* p : {c, pin1, pin2}) r.deallocate(p, s);
  r.free_all_and_trim();
  EXPECT_EQ(r.dev->used_bytes(), 0u);
}

TEST(StreamOrderedMoves, AnOutOfMemoryKeepsNothingItMovedAndLosesNothing) {
  // The limit lets the move happen but not the growth after it. Before it gives up, the pool
  // waits for every stream (its last resort): A's old place is unmapped, and what the request
  // had taken is given back. Left: the 2 MiB block, and nothing else reserved.
  sim_pool_rig r = lagging_rig(true, 100 * MiB);
  const stream_ref s = r.dev->create_stream();
  void* a = r.allocate(64 * MiB, default_alignment, s);
  void* pin = r.allocate(2 * MiB, default_alignment, s);
  r.deallocate(a, s);
  EXPECT_THROW(r.allocate(160 * MiB, default_alignment, s), out_of_memory);
  r.model->check_full();
  EXPECT_EQ(r.p->stats().reserved_bytes, 2 * MiB);
  EXPECT_EQ(r.dev->used_bytes(), 2 * MiB);
  void* b = r.allocate(64 * MiB, default_alignment, s);  // the pool still works
  r.deallocate(b, s);
  r.deallocate(pin, s);
  r.free_all_and_trim();
  EXPECT_EQ(r.dev->used_bytes(), 0u);
}

TEST(StreamOrderedMoves, TheModelCatchesMemoryHandedOutWhileInUseAtItsOtherPlace) {
  // The check the tests above rely on can fail: one handle mapped at two places by hand, a block
  // freed on s at the first, then the second handed to t before s is known to be past the free.
  sim_pool_rig r = lagging_rig(true);
  const stream_ref s = r.dev->create_stream(), t = r.dev->create_stream();
  const std::size_t g = 2 * MiB;
  auto* base = static_cast<char*>(r.up->reserve_range(2 * g));
  const physical_handle h = *r.up->create_physical(g);
  r.up->map(base, g, h);
  r.up->map(base + g, g, h);
  r.model->on_allocate(base, MiB, default_alignment, s);
  r.model->on_free(base, s);
  EXPECT_THROW(r.model->on_allocate(base + g, MiB, default_alignment, t), gpumem::test::model_error);
  // Same stream: its later work is ordered after the free.
  EXPECT_NO_THROW(r.model->on_allocate(base + g, MiB, default_alignment, s));
  r.model->on_free(base + g, s);
  r.dev->memory().unmap(base, 2 * g);  // past the spy: the model would (rightly) flag these unmaps
  r.dev->memory().release_physical(h, g);
  r.dev->memory().release_range(base, 2 * g);
}

// The example inference trace on a device that finishes its queued work only every 50
// operations: moving the stream's own pending memory holds the reserve that growing beside it
// loses, with no host wait.
double fragmentation_of_varlen(std::size_t lag, bool moves, std::uint64_t* moved = nullptr) {
  const trace t = read_trace(std::filesystem::path(GPUMEM_EXAMPLES) / "varlen_inference.csv");
  detail::pool_tuning tuning;
  gpumem::test::use_moving_policy(tuning);
  tuning.stream_ordered_moves = moves;
  replay_options o;
  o.device_lag_ops = lag;
  o.tuning = &tuning;
  const replay_result r = replay(t, o);
  EXPECT_EQ(r.failed_allocs, 0u);
  if (moved) *moved = r.stats.stream_ordered_moves;
  return r.fragmentation;
}

TEST(StreamOrderedMoves, ALaggingDeviceLoosensTheReserveLessWithThem) {
  std::uint64_t moved_in_step = 0, moved_lagging = 0;
  const double keeps_up = fragmentation_of_varlen(0, true, &moved_in_step);
  const double without = fragmentation_of_varlen(50, false);
  const double with = fragmentation_of_varlen(50, true, &moved_lagging);
  EXPECT_EQ(moved_in_step, 0u) << "a device that keeps up leaves nothing pending to move";
  EXPECT_GT(moved_lagging, 0u);
  // With the moves the reserve stays near the floor; without, the pool grows beside pending memory.
  EXPECT_LT(with, without - 0.1) << "keeps up " << keeps_up;
  EXPECT_LT(with, 1.05);
  EXPECT_LT(keeps_up, 1.03);
}

}  // namespace
