// pool_tuning::max_handle_bytes: growth makes one physical handle per run of missing granules (up
// to that size), each mapped in one piece, and a handle is only ever unmapped, moved or given back
// whole. By default the tight policy keeps one granule per handle; grow_before_reclaim takes 32 MiB.
// (The randomized sequences in pool_random_test.cpp run 8 MiB handles and the grow-first policy
// into out-of-memory against the shadow model.)
#include <gtest/gtest.h>

#include <vector>

#include "support/pool_model.hpp"

namespace {

using namespace gpumem;
using gpumem::test::sim_pool_rig;
using gpumem::test::MiB;

detail::pool_config options(bool grow_first, std::size_t handle_bytes) {
  detail::pool_config po;
  po.grow_before_reclaim = grow_first;
  po.max_handle_bytes = handle_bytes;
  return po;
}

// Physical handles created for one 64 MiB block on a fresh pool.
std::uint64_t handles_for_64_mib(const detail::pool_config& po) {
  sim_pool_rig r(sim_options{.capacity_bytes = std::size_t{1} << 30, .auto_complete = true}, po);
  void* p = r.allocate(64 * MiB, default_alignment, stream_ref{});
  const std::uint64_t calls = r.dev->upstream_calls();
  EXPECT_EQ(r.p->stats().reserved_bytes, 64 * MiB);
  r.model->check_full();
  r.deallocate(p, stream_ref{});
  r.free_all_and_trim();
  return calls;
}

TEST(HandleSize, ByPolicyOneGranuleTightAnd32MiBGrowingFirst) {
  EXPECT_EQ(handles_for_64_mib(options(false, 0)), 32u);
  EXPECT_EQ(handles_for_64_mib(options(true, 0)), 2u);
  EXPECT_EQ(handles_for_64_mib(options(true, 2 * MiB)), 32u);
  EXPECT_EQ(handles_for_64_mib(options(false, 16 * MiB)), 4u);
  // Not a multiple of the 2 MiB granule: whole granules only (3 MiB -> one).
  EXPECT_EQ(handles_for_64_mib(options(false, 3 * MiB)), 32u);
}

TEST(HandleSize, AHandleHoldingALiveBlockStaysMappedWhole) {
  // 32 MiB in two 16 MiB handles, freed; a 2 MiB block then lands at the bottom, in the first
  // handle. Trim gives back only the second: the first cannot be unmapped in part.
  sim_pool_rig r(sim_options{.capacity_bytes = std::size_t{1} << 30, .auto_complete = true}, options(false, 16 * MiB));
  void* big = r.allocate(32 * MiB, default_alignment, stream_ref{});
  ASSERT_EQ(r.dev->upstream_calls(), 2u);
  r.deallocate(big, stream_ref{});
  void* small = r.allocate(2 * MiB, default_alignment, stream_ref{});
  EXPECT_EQ(r.dev->upstream_calls(), 2u);  // on mapped memory: no new handle
  r.p->trim();
  r.model->check_full();
  EXPECT_EQ(r.p->stats().reserved_bytes, 16 * MiB);
  EXPECT_EQ(r.dev->used_bytes(), 16 * MiB);
  r.deallocate(small, stream_ref{});
  r.free_all_and_trim();
}

// a (16 MiB, one handle) | b (2 MiB) | e (10 MiB, one handle of 5 granules); a and e freed. 17 MiB
// does not fit where a was, so it goes over e's idle granules and 4 unmapped ones above them. The
// only idle handle outside that window is a's, 8 granules for a need of 4: it cannot be mapped
// there in part, so the tight policy gives it back and makes a 4-granule one rather than grow
// beside it. Returns the pool's reserved bytes after.
std::size_t reserved_after_small_need_beside_large_idle_handle(std::size_t capacity) {
  sim_pool_rig r(sim_options{.capacity_bytes = capacity, .auto_complete = true}, options(false, 16 * MiB));
  void* a = r.allocate(16 * MiB, default_alignment, stream_ref{});
  void* b = r.allocate(2 * MiB, default_alignment, stream_ref{});
  void* e = r.allocate(10 * MiB, default_alignment, stream_ref{});
  EXPECT_EQ(r.dev->upstream_calls(), 3u);
  r.deallocate(a, stream_ref{});
  r.deallocate(e, stream_ref{});
  void* c = nullptr;
  EXPECT_NO_THROW(c = r.allocate(17 * MiB, default_alignment, stream_ref{}));
  r.model->check_full();
  EXPECT_LE(r.p->stats().peak_reserved_bytes, 28 * MiB);
  const std::size_t reserved = r.p->stats().reserved_bytes;
  for (void* p : {b, c})
    if (p) r.deallocate(p, stream_ref{});
  r.free_all_and_trim();
  return reserved;
}

TEST(HandleSize, TheTightPolicyGivesBackALargeIdleHandleRatherThanGrowBesideIt) {
  EXPECT_EQ(reserved_after_small_need_beside_large_idle_handle(std::size_t{1} << 30), 20 * MiB);
  // The same on a device with no room to grow beside it: 28 MiB, full before the 17 MiB request.
  EXPECT_EQ(reserved_after_small_need_beside_large_idle_handle(28 * MiB), 20 * MiB);
}

}  // namespace
