// Kept mappings (arena.hpp): a granule moved away from a place (by a move, or when a place a
// stream-ordered move left retires) stays mapped there too, so moving it back costs no driver
// call; a place another handle needs loses its kept mapping first; and every kept mapping is gone
// before its handle goes back to the upstream.
#include <gtest/gtest.h>

#include <filesystem>

#include "gpumem/replay.hpp"
#include "gpumem/trace.hpp"
#include "support/pool_model.hpp"
#include "support/moving_policy.hpp"

namespace {

using namespace gpumem;
using gpumem::test::MiB;
using gpumem::test::sim_pool_rig;

// Front caches off, so every free reaches the arena; 70 MiB of address space (35 granules), so
// where each request can land is forced.
detail::pool_config narrow_range() {
  detail::pool_config po;
  gpumem::test::use_moving_policy(po);
  po.front_cache = false;
  po.address_range_bytes = 70 * MiB;
  return po;
}

// A (32 MiB at 0) is freed; C (36 MiB) fits only above the 2 MiB pin, on A's 16 granules moved
// there (kept mapped at 0) and 2 new.
struct moved_away {
  sim_pool_rig r{sim_options{.capacity_bytes = std::size_t{1} << 30, .auto_complete = true}, narrow_range()};
  void* a = r.allocate(32 * MiB, default_alignment, stream_ref{});
  void* pin = r.allocate(2 * MiB, default_alignment, stream_ref{});
  void* c = (r.deallocate(a, stream_ref{}), r.allocate(36 * MiB, default_alignment, stream_ref{}));
};

// After moved_away: C is freed and E (6 MiB) takes the bottom of C's place; D
// (32 MiB) then fits only at 0, where 13 of the 16 kept mappings belong to handles idle in C's
// place: they move back with no driver call. The 3 whose handles are under E stay busy there, so
// C's 2 new granules move in and 1 more is created, each over a kept mapping unmapped first.
TEST(KeptMapping, AGranuleMovedBackWhereItIsStillMappedCostsNoDriverCall) {
  moved_away x;
  sim_pool_rig& r = x.r;
  void *a = x.a, *pin = x.pin, *c = x.c;
  const pool_stats after_c = r.p->stats();
  EXPECT_EQ(after_c.unmaps, 16u) << "A's granules left their place";
  EXPECT_EQ(after_c.driver_unmaps, 0u) << "...but stayed mapped there";
  EXPECT_EQ(after_c.kept_mappings, 16u);
  EXPECT_EQ(after_c.reserved_bytes, 38 * MiB) << "A's memory counted once";
  r.deallocate(c, stream_ref{});
  void* e = r.allocate(6 * MiB, default_alignment, stream_ref{});
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(e), reinterpret_cast<std::uintptr_t>(pin) + 2 * MiB);
  const pool_stats before_d = r.p->stats();
  void* d = r.allocate(32 * MiB, default_alignment, stream_ref{});
  const pool_stats after_d = r.p->stats();
  EXPECT_EQ(d, a) << "D fits only where A was";
  EXPECT_EQ(after_d.maps - before_d.maps, 16u);
  EXPECT_EQ(after_d.driver_maps - before_d.driver_maps, 3u) << "13 granules moved back where they were mapped";
  EXPECT_EQ(after_d.driver_unmaps - before_d.driver_unmaps, 3u) << "3 kept mappings made room for other handles";
  EXPECT_EQ(after_d.reserved_bytes, 40 * MiB) << "one granule more: 20 are live";
  r.model->check_full();
  r.deallocate(d, stream_ref{});
  r.deallocate(e, stream_ref{});
  r.deallocate(pin, stream_ref{});
  r.free_all_and_trim();
  const pool_stats end = r.p->stats();
  EXPECT_EQ(end.kept_mappings, 0u) << "trim unmaps every kept mapping before releasing its handle";
  EXPECT_EQ(end.driver_maps, end.driver_unmaps) << "every mapping the driver made is undone";
  EXPECT_EQ(r.dev->used_bytes(), 0u);
}

// The pool's destructor unmaps kept mappings too: the device is left with nothing mapped.
TEST(KeptMapping, ThePoolsEndUnmapsThemAll) {
  moved_away x;
  sim_pool_rig& r = x.r;
  void *a = x.a, *pin = x.pin, *c = x.c;
  ASSERT_EQ(r.p->stats().kept_mappings, 16u);
  ASSERT_TRUE(r.dev->is_mapped(a, 32 * MiB)) << "the simulated driver still maps A's place";
  r.deallocate(c, stream_ref{});
  r.deallocate(pin, stream_ref{});
  r.model->check_full();
  r.up->watch(nullptr);
  r.model.reset();
  r.p.reset();
  EXPECT_FALSE(r.dev->is_mapped(a, 2 * MiB));
  EXPECT_EQ(r.dev->used_bytes(), 0u);
}

// Stream-ordered moves (pool_tuning::stream_ordered_moves): memory stream S freed while its work
// is still queued is mapped a second time under S's next request, and its old place retires. Once
// S has run past the frees there, the old place stays mapped as a kept mapping instead of being
// unmapped: no driver call, and the next request there may take it back for free.
TEST(KeptMapping, ARetiringPlaceBecomesAKeptMappingNotADriverUnmap) {
  detail::pool_config po;
  gpumem::test::use_moving_policy(po);
  po.stream_ordered_moves = true;
  sim_pool_rig r(sim_options{.capacity_bytes = std::size_t{1} << 30}, po);  // completes nothing until told
  const stream_ref s = r.dev->create_stream();
  void* a = r.allocate(64 * MiB, default_alignment, s);
  void* pin = r.allocate(2 * MiB, default_alignment, s);
  r.deallocate(a, s);
  void* c = r.allocate(96 * MiB, default_alignment, s);  // A's 32 granules moved in stream order
  ASSERT_EQ(r.p->stats().stream_ordered_moves, 32u);
  r.dev->complete(s);
  // A request that needs a new granule looks at the stream clock first: A's place finishes
  // retiring, and the request lands at its start (the best fit), on a new granule. Its handle is
  // busy in C's place, so the kept mapping there gives way: one driver unmap, the other 31 stay.
  void* f = r.allocate(2 * MiB, default_alignment, s);
  EXPECT_EQ(f, a);
  const pool_stats st = r.p->stats();
  EXPECT_EQ(st.kept_mappings, 31u);
  EXPECT_EQ(st.driver_unmaps, 1u) << "A's old place stayed mapped but under F";
  EXPECT_EQ(st.unmaps, 32u) << "the pool counts all 32 unmapped";
  EXPECT_TRUE(r.dev->is_mapped(a, 64 * MiB));
  EXPECT_EQ(r.dev->used_bytes(), st.reserved_bytes) << "its memory is counted once";
  r.model->check_full();
  for (void* p : {c, f, pin}) r.deallocate(p, s);
  r.dev->complete_all();
  r.free_all_and_trim();
  EXPECT_EQ(r.p->stats().kept_mappings, 0u);
  EXPECT_EQ(r.dev->used_bytes(), 0u);
}

// The example inference trace (varying shapes, tight reserve), its first pass (later ones follow
// the stretch library's layouts and move little): a third of its moves go back where the granule
// was still mapped, and the reserve is what it was without kept mappings.
TEST(KeptMapping, OnAVaryingShapeTraceManyMovesCostNoDriverCall) {
  const trace t = read_trace(std::filesystem::path(GPUMEM_EXAMPLES) / "varlen_inference.csv");
  replay_options o;
  o.passes = 1;
  const replay_result r = replay(t, o);
  EXPECT_EQ(r.failed_allocs, 0u);
  const pool_stats& s = r.stats;
  ASSERT_GT(s.maps + s.unmaps, 500u);
  EXPECT_LT(double(s.driver_maps + s.driver_unmaps), 0.8 * double(s.maps + s.unmaps));
  EXPECT_LT(s.fragmentation(), 1.03);
}

}  // namespace
