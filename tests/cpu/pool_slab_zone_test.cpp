// Growing first on a virtual upstream, slabs are carved from their own half of the address range
// (slab_zone_for in pool.cpp): a slab carved while large blocks are live never lands in the hole
// between them, so once they are freed their memory is one run again and a request as large as
// both together takes it without growing. With an initial reserve, by default, or when the
// address range is too small for halves, placement is as before.
#include <gtest/gtest.h>

#include <cstdint>
#include <utility>
#include <vector>

#include "gpumem/detail/pool_tuning.hpp"
#include "gpumem/pool.hpp"
#include "gpumem/sim_device.hpp"
#include "support/moving_policy.hpp"

namespace {

using namespace gpumem;
constexpr std::size_t MiB = std::size_t{1} << 20;

sim_options device() {
  sim_options so;
  so.capacity_bytes = std::size_t{1} << 30;
  so.auto_complete = true;
  return so;
}

// Two 48 MiB blocks side by side; the first is freed; a small request carves a slab; the second
// is freed; then 96 MiB. Front caches off, so the freed blocks go straight to the arena.
struct hole_scenario {
  std::size_t reserved_before = 0, reserved_after = 0;
  std::uintptr_t slot = 0, first = 0;
};
hole_scenario run_hole_scenario(const detail::pool_config& base) {
  sim_device dev(device());
  detail::pool_config po = base;
  po.front_cache = false;
  pool p(dev.memory(), dev.streams(), po, po);
  hole_scenario r;
  void* a = p.allocate(48 * MiB, default_alignment, stream_ref{});
  void* b = p.allocate(48 * MiB, default_alignment, stream_ref{});
  r.first = reinterpret_cast<std::uintptr_t>(a);
  p.deallocate(a, 48 * MiB, default_alignment, stream_ref{});
  void* small = p.allocate(4096, default_alignment, stream_ref{});
  r.slot = reinterpret_cast<std::uintptr_t>(small);
  p.deallocate(b, 48 * MiB, default_alignment, stream_ref{});
  r.reserved_before = p.stats().reserved_bytes;
  void* both = p.allocate(96 * MiB, default_alignment, stream_ref{});
  r.reserved_after = p.stats().reserved_bytes;
  p.check_invariants();
  p.deallocate(both, 96 * MiB, default_alignment, stream_ref{});
  p.deallocate(small, 4096, default_alignment, stream_ref{});
  p.check_invariants();
  return r;
}

TEST(SlabZone, GrowingFirstASlabNeverSplitsTheLargeBlocksMemory) {
  detail::pool_config po;
  gpumem::test::use_moving_policy(po);
  po.grow_before_reclaim = true;
  const hole_scenario r = run_hole_scenario(po);
  EXPECT_FALSE(r.slot >= r.first && r.slot < r.first + 96 * MiB) << "the slab landed among the large blocks";
  EXPECT_EQ(r.reserved_after, r.reserved_before) << "96 MiB where two 48 MiB blocks were should map nothing new";
}

// The tight policy gives empty slabs back and moves idle granules instead: no zone, and there the
// slab does land in the hole (best fit), which is what the zone exists to prevent growing first.
TEST(SlabZone, NotByDefaultNorWithAnInitialReserve) {
  {
    const hole_scenario r = run_hole_scenario(detail::pool_config{});
    EXPECT_EQ(r.slot, r.first) << "by default the slab takes the hole's start (best fit, on mapped memory)";
  }
  {
    detail::pool_config po;
    gpumem::test::use_moving_policy(po);
    po.grow_before_reclaim = true;
    po.initial_reserve_bytes = 256 * MiB;  // mapped from the bottom of the range: slabs stay inside it
    const hole_scenario r = run_hole_scenario(po);
    EXPECT_EQ(r.slot, r.first);
    EXPECT_EQ(r.reserved_after, 256 * MiB) << "everything fits the reserve";
  }
}

// An address range too small to halve for a request: it is placed anywhere rather than refused.
TEST(SlabZone, ARequestLargerThanItsHalfIsPlacedAnywhere) {
  sim_device dev(device());
  detail::pool_config po;
  gpumem::test::use_moving_policy(po);
  po.grow_before_reclaim = true;
  po.address_range_bytes = 64 * MiB;
  pool p(dev.memory(), dev.streams(), po, po);
  void* big = nullptr;
  ASSERT_NO_THROW(big = p.allocate(40 * MiB, default_alignment, stream_ref{}));
  void* small = p.allocate(512, default_alignment, stream_ref{});
  p.check_invariants();
  p.deallocate(small, 512, default_alignment, stream_ref{});
  p.deallocate(big, 40 * MiB, default_alignment, stream_ref{});
  p.check_invariants();
}

// Near the device's limit the slabs' granules are not lost to large blocks: once the slabs are
// empty and given back, a large request that cannot grow moves those idle granules to its half.
TEST(SlabZone, AFullDeviceMovesTheSlabsIdleGranulesToALargeRequest) {
  sim_options so = device();
  so.capacity_bytes = 64 * MiB;
  sim_device dev(so);
  detail::pool_config po;
  gpumem::test::use_moving_policy(po);
  po.grow_before_reclaim = true;
  po.max_handle_bytes = 2 * MiB;  // single granules: any idle one can move (pool.hpp, max_handle_bytes)
  pool p(dev.memory(), dev.streams(), po, po);
  std::vector<std::pair<void*, std::size_t>> small;
  for (int i = 0; i < 120; ++i) {  // ~29 MiB of small blocks
    const std::size_t bytes = 4096 + 8192 * std::size_t(i % 60);
    small.emplace_back(p.allocate(bytes, default_alignment, stream_ref{}), bytes);
  }
  const std::size_t slab_reserved = p.stats().reserved_bytes;
  ASSERT_GT(slab_reserved, 0u);
  for (auto [ptr, bytes] : small) p.deallocate(ptr, bytes, default_alignment, stream_ref{});
  p.settle();  // empty slabs back to the arena: their granules are idle in the slabs' half
  p.check_invariants();
  // All the device holds, in one block of the large blocks' half.
  const std::size_t all = 64 * MiB;
  void* big = nullptr;
  ASSERT_NO_THROW(big = p.allocate(all, default_alignment, stream_ref{}));
  EXPECT_EQ(p.stats().reserved_bytes, all);
  EXPECT_GT(p.stats().unmaps, 0u) << "the slabs' granules were moved, not grown beside";
  p.check_invariants();
  p.deallocate(big, all, default_alignment, stream_ref{});
  p.check_invariants();
}

}  // namespace
