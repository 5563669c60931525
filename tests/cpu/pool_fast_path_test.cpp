// pool::allocate's common path serves only requests at the default alignment (256 B) or less: it
// then checks no address, since every block a front cache holds starts on a multiple of 256 B.
// A request at a larger alignment takes the general path, which must still find a cached block
// of its class that happens to be aligned enough, and must never hand out one that is not. Each
// test fails if the common path served a larger alignment (no address check) or if the split
// lost the front cache for the default alignment.
#include <gtest/gtest.h>

#include <cstdint>
#include <utility>
#include <vector>

#include "support/model_check.hpp"
#include "support/pool_model.hpp"
#include "support/moving_policy.hpp"

namespace {

using namespace gpumem;
using gpumem::test::KiB;
using gpumem::test::MiB;
using gpumem::test::sim_pool_rig;

class FastPath : public ::testing::TestWithParam<bool> {  // grow_before_reclaim
 protected:
  std::unique_ptr<sim_pool_rig> rig() const {
    detail::pool_config po;
    gpumem::test::use_moving_policy(po);
    po.grow_before_reclaim = GetParam();
    return std::make_unique<sim_pool_rig>(sim_options{.capacity_bytes = std::size_t{1} << 32, .auto_complete = true},
                                          po);
  }
};

// Blocks of one class cached at 256 B alignment, most of them not aligned to more; then requests
// of the same size at 512 B .. 64 KiB: every one aligned as asked (the model checks each address,
// and so does the test), whether it came from the front cache or not.
TEST_P(FastPath, ALargerAlignmentNeverGetsACachedBlockBelowIt) {
  for (const std::size_t bytes : {std::size_t{1000}, std::size_t{40} * KiB, std::size_t{3} * MiB + 256}) {
    auto r = rig();
    std::vector<void*> held;
    for (int i = 0; i < 24; ++i) held.push_back(r->allocate(bytes, default_alignment, stream_ref{}));
    for (void* p : held) r->deallocate(p, stream_ref{});  // cached in the thread's front cache
    held.clear();
    for (std::size_t align = 512; align <= 64 * KiB; align *= 2) {
      for (int i = 0; i < 4; ++i) {
        void* p = r->allocate(bytes, align, stream_ref{});
        ASSERT_EQ(reinterpret_cast<std::uintptr_t>(p) % align, 0u) << bytes << " B at alignment " << align;
        held.push_back(p);
      }
    }
    gpumem::test::expect_model_holds(*r);
    for (void* p : held) r->deallocate(p, stream_ref{});
    r->free_all_and_trim();
  }
}

// Alignments of 256 B and below take the common path: a freed block of the same size comes back
// from the front cache (a hit, no new block) whichever of them the request names.
TEST_P(FastPath, TheDefaultAlignmentAndSmallerOnesAreServedFromTheFrontCache) {
  for (const std::size_t bytes : {std::size_t{1000}, std::size_t{3} * MiB + 256}) {
    auto r = rig();
    r->deallocate(r->allocate(bytes, default_alignment, stream_ref{}), stream_ref{});
    const pool_stats before = r->p->stats();
    for (const std::size_t align : {std::size_t{1}, std::size_t{8}, std::size_t{64}, std::size_t{256}}) {
      void* p = r->allocate(bytes, align, stream_ref{});
      r->deallocate(p, stream_ref{});
    }
    const pool_stats after = r->p->stats();
    EXPECT_EQ(after.front_hits - before.front_hits, 4u) << bytes;
    EXPECT_EQ(after.reserved_bytes, before.reserved_bytes) << bytes;
    r->free_all_and_trim();
  }
}

INSTANTIATE_TEST_SUITE_P(Policies, FastPath, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "GrowFirst" : "Default"; });

}  // namespace
