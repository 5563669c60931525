// A driver may give a released handle's value to new memory (cuMemRelease then cuMemCreate can
// return the same CUmemGenericAllocationHandle). The arena keeps driver mappings of handles that
// moved (kept mappings, arena.hpp), and a place a stream-ordered move left is still mapped to its
// handle until it retires: if that handle goes back to the upstream meanwhile, the place must be
// unmapped when it retires, not kept — else a new handle with the same value would "find" its
// kept mapping there and be handed out unmapped, over memory already released.
#include <gtest/gtest.h>

#include "support/pool_model.hpp"

namespace {

using namespace gpumem;
using gpumem::test::MiB;
using gpumem::test::sim_pool_rig;

constexpr std::size_t G = 2 * MiB;  // the simulator's granule

void* at(void* base, std::size_t granule) { return static_cast<char*>(base) + granule * G; }

// The simulator with reuse_handle_values: the value released last comes back first, and a mapping
// left over from the released memory still counts as mapped (it is, until unmapped) but not as
// live — also once new memory has the value.
TEST(HandleReuse, TheSimulatorGivesTheLastReleasedValueToNewMemory) {
  for (const bool reuse : {false, true}) {
    sim_device dev(sim_options{.reuse_handle_values = reuse});
    upstream& up = dev.memory();
    auto* base = static_cast<std::byte*>(up.reserve_range(4 * G));
    const physical_handle h1 = *up.create_physical(G), h2 = *up.create_physical(G);
    up.map(base, G, h1);
    EXPECT_EQ(dev.mapped_handle(base), h1.value);
    EXPECT_TRUE(dev.is_mapped_live(base, G));
    up.release_physical(h2, G);
    up.release_physical(h1, G);  // still mapped at base
    EXPECT_TRUE(dev.is_mapped(base, G));
    EXPECT_FALSE(dev.is_mapped_live(base, G));
    const physical_handle n = *up.create_physical(G);
    EXPECT_EQ(n == h1, reuse) << "off, a value is never handed out twice";
    up.map(base + G, G, n);
    EXPECT_TRUE(dev.is_mapped_live(base + G, G));
    EXPECT_FALSE(dev.is_mapped_live(base, 2 * G)) << "base still maps the released memory, whatever its value names now";
    EXPECT_EQ(dev.mapped_handle(base), h1.value);
    EXPECT_EQ(dev.mapped_handle(base + 2 * G), 0u);
    up.unmap(base, 2 * G);
    up.release_physical(n, G);
    if (reuse) {  // last in, first out
      const physical_handle again = *up.create_physical(G), next = *up.create_physical(G);
      EXPECT_EQ(again.value, h1.value);
      EXPECT_EQ(next.value, h2.value);
      up.release_physical(again, G);
      up.release_physical(next, G);
    }
    up.release_range(base, 4 * G);
    EXPECT_EQ(dev.used_bytes(), 0u);
  }
}

// Five granules g0..g4; the device finishes nothing until told; front caches off so every free
// reaches the arena. Cached memory above one granule goes back to the upstream at each free,
// without waiting for any stream (a trim would wait for them all and finish every retiring place
// first).
TEST(HandleReuse, ARetiringPlaceWhoseHandleWasReleasedIsNotKeptForANewHandleWithItsValue) {
  detail::pool_config po;
  po.front_cache = false;
  po.stream_ordered_moves = true;
  po.address_range_bytes = 5 * G;
  po.release_threshold_bytes = G;
  sim_pool_rig r(sim_options{.capacity_bytes = std::size_t{1} << 30, .reuse_handle_values = true}, po);
  const stream_ref s = r.dev->create_stream(), t = r.dev->create_stream();

  // A at g0, B at g1, X at g2, all on S. A is freed on S, and C (two granules) fits only at g3-g4:
  // A's handle is mapped there under C (S's queued work runs before C's) and g0 retires.
  void* a = r.allocate(G, default_alignment, s);
  void* b = r.allocate(G, default_alignment, s);
  void* x = r.allocate(G, default_alignment, s);
  ASSERT_EQ(b, at(a, 1));
  ASSERT_EQ(x, at(a, 2));
  const std::uint64_t h = r.dev->mapped_handle(a);
  r.deallocate(a, s);
  void* c = r.allocate(2 * G, default_alignment, s);
  ASSERT_EQ(c, at(a, 3));
  ASSERT_EQ(r.p->stats().stream_ordered_moves, 1u);
  ASSERT_EQ(r.dev->mapped_handle(c), h) << "A's handle moved under C";

  // C is freed on T and T finishes: C's place is idle while S has not reached A's free, so g0 is
  // still retiring. Freeing B puts cached memory over the threshold: C's two handles are unmapped
  // and released, A's among them, its old place still mapped.
  r.deallocate(c, t);
  r.dev->complete(t);
  r.deallocate(b, s);
  ASSERT_EQ(r.p->stats().upstream_releases, 2u);
  ASSERT_EQ(r.dev->mapped_handle(a), h) << "g0 still maps the released memory for S's queued work";
  ASSERT_FALSE(r.dev->is_mapped_live(a, G));

  // New memory on T, one granule at g3 and one at g4, gets the released values back; the one at
  // g3 is A's value (released last), and is freed again: idle there once T finishes.
  void* d = r.allocate(G, default_alignment, t);
  void* y = r.allocate(G, default_alignment, t);
  ASSERT_EQ(d, at(a, 3));
  ASSERT_EQ(y, at(a, 4));
  ASSERT_EQ(r.dev->mapped_handle(d), h) << "the device gave A's value to new memory";
  ASSERT_TRUE(r.dev->is_mapped_live(d, G));
  r.deallocate(d, t);
  r.dev->complete(t);

  // S finishes: g0 retires. A request of two granules fits only at g0-g1. Had g0 been kept mapped
  // as A's value, the arena would take the idle handle at g3 "back" to g0 with no driver call and
  // hand out the released memory still mapped there.
  r.dev->complete(s);
  const pool_stats before = r.p->stats();
  void* e = r.p->allocate(2 * G, default_alignment, s);  // the model is told below, after these checks
  const pool_stats after = r.p->stats();
  EXPECT_EQ(e, a);
  EXPECT_TRUE(r.dev->is_mapped_live(e, 2 * G)) << "E lies on memory released, still mapped at g0";
  EXPECT_EQ(after.driver_unmaps - before.driver_unmaps, 1u) << "g0 unmapped when it retired";
  EXPECT_EQ(after.driver_maps - before.driver_maps, 1u) << "g0 mapped again by the driver (g1 still was)";
  EXPECT_EQ(after.maps - before.maps, 1u);
  EXPECT_EQ(after.kept_mappings, 1u) << "the one kept mapping: where the handle moved to g0 came from (g3)";
  EXPECT_EQ(r.dev->used_bytes(), after.reserved_bytes) << "each handle's memory counted once";
  r.model->on_allocate(e, 2 * G, default_alignment, s);
  r.model->check_full();

  for (void* p : {e, x, y}) r.deallocate(p, s);
  r.dev->complete_all();
  r.free_all_and_trim();
  const pool_stats end = r.p->stats();
  EXPECT_EQ(end.driver_maps, end.driver_unmaps) << "every mapping the driver made is undone";
  EXPECT_EQ(end.upstream_calls, end.upstream_releases) << "every handle created went back";
  EXPECT_EQ(r.dev->used_bytes(), 0u);
}

}  // namespace
