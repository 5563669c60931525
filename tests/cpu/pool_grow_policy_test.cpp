// pool_tuning::grow_before_reclaim: the pool grows before it empties front caches and gives back
// empty slabs, and still reclaims — rather than fail — when growing is refused. The default keeps
// the tight policy: caching never makes the pool grow.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "size_class.hpp"
#include "support/pool_model.hpp"
#include "support/moving_policy.hpp"

namespace {

using namespace gpumem;
using gpumem::test::rng;
using gpumem::test::sim_pool_rig;
using gpumem::test::KiB;
using gpumem::test::MiB;


// Blocks of one small class are allocated and freed (their slabs stay, partly in the front cache),
// then blocks of another class need new slabs. Returns reserved bytes after the second phase.
std::size_t reserved_after_class_switch(bool grow_first) {
  detail::pool_config po;
  gpumem::test::use_moving_policy(po);
  po.grow_before_reclaim = grow_first;
  sim_pool_rig r(sim_options{.capacity_bytes = std::size_t{1} << 30, .auto_complete = true}, po);
  std::vector<void*> held;
  for (int i = 0; i < 64; ++i) held.push_back(r.allocate(200 * KiB, default_alignment, stream_ref{}));
  for (void* p : held) r.deallocate(p, stream_ref{});
  held.clear();
  for (int i = 0; i < 64; ++i) held.push_back(r.allocate(100 * KiB, default_alignment, stream_ref{}));
  r.model->check_full();
  const std::size_t reserved = r.p->stats().reserved_bytes;
  for (void* p : held) r.deallocate(p, stream_ref{});
  r.free_all_and_trim();
  return reserved;
}

TEST(GrowBeforeReclaim, GrowsWhereTheDefaultReusesWhatTheCachesHeld) {
  const std::size_t tight = reserved_after_class_switch(false);
  const std::size_t grown = reserved_after_class_switch(true);
  // 64 x 200 KiB is 12.5 MiB of slabs; the second class needs 6.25 MiB more of them. The default
  // carves them from the first class's emptied slabs; growing first keeps those and maps more.
  EXPECT_LE(tight, 14 * MiB);
  EXPECT_GE(grown, tight + 6 * MiB);
}

TEST(GrowBeforeReclaim, ReclaimsInsteadOfFailingWhenTheDeviceIsFull) {
  // 32 MiB of device. 20 MiB of small blocks come and go (their slabs stay reserved); then a
  // 24 MiB block cannot be had by growing, so the pool must give the slabs back and use them.
  detail::pool_config po;
  gpumem::test::use_moving_policy(po);
  po.grow_before_reclaim = true;
  sim_pool_rig r(sim_options{.capacity_bytes = 32 * MiB, .auto_complete = true}, po);
  std::vector<void*> held;
  for (int i = 0; i < 100; ++i) held.push_back(r.allocate(200 * KiB, default_alignment, stream_ref{}));
  for (void* p : held) r.deallocate(p, stream_ref{});
  ASSERT_GT(r.p->stats().reserved_bytes, 16 * MiB);
  void* big = nullptr;
  ASSERT_NO_THROW(big = r.allocate(24 * MiB, default_alignment, stream_ref{}));
  EXPECT_LE(r.p->stats().reserved_bytes, 32 * MiB);
  EXPECT_EQ(r.p->stats().failed_allocations, 0u);
  r.model->check_full();
  r.deallocate(big, stream_ref{});
  r.free_all_and_trim();
}

TEST(GrowBeforeReclaim, ReclaimsAtThePoolsOwnLimit) {
  // The same with the limit set by max_reserved_bytes instead of the device.
  detail::pool_config po;
  gpumem::test::use_moving_policy(po);
  po.grow_before_reclaim = true;
  po.max_reserved_bytes = 32 * MiB;
  sim_pool_rig r(sim_options{.capacity_bytes = std::size_t{1} << 30, .auto_complete = true}, po);
  std::vector<void*> held;
  for (int i = 0; i < 100; ++i) held.push_back(r.allocate(200 * KiB, default_alignment, stream_ref{}));
  for (void* p : held) r.deallocate(p, stream_ref{});
  void* big = nullptr;
  ASSERT_NO_THROW(big = r.allocate(24 * MiB, default_alignment, stream_ref{}));
  EXPECT_LE(r.p->stats().peak_reserved_bytes, 32 * MiB);
  r.model->check_full();
  r.deallocate(big, stream_ref{});
  r.free_all_and_trim();
}

// A 30 MiB block is freed (its granules stay mapped and idle), then a 36 MiB one is asked for while
// a 4 MiB block bounds the hole. Returns the pool's stats after that.
pool_stats after_idle_granules(bool grow_first, std::size_t capacity) {
  detail::pool_config po;
  gpumem::test::use_moving_policy(po);
  po.grow_before_reclaim = grow_first;
  return gpumem::test::stats_after_idle_hole(sim_options{.capacity_bytes = capacity, .auto_complete = true}, po,
                                             30 * MiB, 4 * MiB, 36 * MiB);
}

TEST(GrowBeforeReclaim, IdleGranulesStayMappedWhileThePoolCanGrow) {
  const pool_stats tight = after_idle_granules(false, std::size_t{1} << 30);
  const pool_stats grown = after_idle_granules(true, std::size_t{1} << 30);
  EXPECT_GT(tight.unmaps, 0u) << "the default remaps the idle granules";
  EXPECT_EQ(grown.unmaps, 0u) << "growing first leaves them mapped";
  EXPECT_GE(grown.reserved_bytes, tight.reserved_bytes + 28 * MiB);
}

TEST(GrowBeforeReclaim, IdleGranulesAreRemappedWhenTheDeviceIsFull) {
  // 40 MiB of device: 36 MiB more cannot be created, so the idle granules must move after all.
  const pool_stats st = after_idle_granules(true, 40 * MiB);
  EXPECT_GT(st.unmaps, 0u);
  EXPECT_LE(st.reserved_bytes, 40 * MiB);
  EXPECT_EQ(st.failed_allocations, 0u);
}

TEST(GrowBeforeReclaim, ManyThreadsOnTheirOwnStreamsStayConsistent) {
  // Eight threads, each on its own stream, sizes across the slab range and past it; every block is
  // checked against the shadow model, and the invariants at the end.
  detail::pool_config po;
  gpumem::test::use_moving_policy(po);
  po.grow_before_reclaim = true;
  sim_pool_rig r(sim_options{.capacity_bytes = std::size_t{8} << 30, .auto_complete = true}, po);
  constexpr int threads = 8;
  std::vector<stream_ref> streams(threads);
  for (auto& s : streams) s = r.dev->create_stream();
  std::atomic<bool> failed{false};
  std::string err;
  std::mutex err_m;
  std::vector<std::thread> ts;
  for (int t = 0; t < threads; ++t)
    ts.emplace_back([&, t] {
      rng g(77 + static_cast<std::uint64_t>(t));
      const stream_ref s = streams[static_cast<std::size_t>(t)];
      std::vector<void*> held;
      try {
        for (int i = 0; i < 20000; ++i) {
          if (held.size() < 100 && (held.empty() || g.chance(50))) {
            held.push_back(r.allocate(gpumem::test::log_uniform(g.next(), g.next(), 256, 4 * MiB), default_alignment, s));
          } else {
            const auto k = g.below(held.size());
            r.deallocate(held[k], s);
            held[k] = held.back();
            held.pop_back();
          }
        }
        for (void* p : held) r.deallocate(p, s);
      } catch (const std::exception& e) {
        std::lock_guard lock(err_m);
        err = e.what();
        failed = true;
      }
    });
  for (auto& t : ts) t.join();
  ASSERT_FALSE(failed.load()) << err;
  r.p->check_invariants();
  r.model->check_full();
  EXPECT_EQ(r.p->stats().live_bytes, 0u);
  r.free_all_and_trim();
}

// --- Large blocks growing first: the front caches serve sizes of a class from one another's
// blocks, keep large blocks up to a share of live memory, and a cached block that fits is carved
// before the pool grows. -----------------------------------------------------------------------

// Allocations the front caches did not serve: each took the pool's lock.
std::uint64_t slow_allocations(const pool& p) {
  const pool_stats st = p.stats();
  return st.allocations - st.front_hits;
}

// The size of the block at `q` in the pool's block map (0 if none starts there).
std::size_t block_bytes_at(const pool& p, const void* q) {
  for (const block_info& b : p.blocks())
    if (b.address == reinterpret_cast<std::uintptr_t>(q)) return b.bytes;
  return 0;
}

detail::pool_config grow_first(double fraction = detail::pool_config{}.front_cache_grow_fraction) {
  detail::pool_config po;
  gpumem::test::use_moving_policy(po);
  po.grow_before_reclaim = true;
  po.front_cache_grow_fraction = fraction;
  return po;
}

// 3 MiB + 96 KiB and 3 MiB + 32 KiB share the size class (3 MiB, 3.25 MiB]; 2900 KiB lies in the
// class below it.
constexpr std::size_t in_class = 3 * MiB + 96 * KiB;
constexpr std::size_t same_class_smaller = 3 * MiB + 32 * KiB;
constexpr std::size_t class_below = 2900 * KiB;
static_assert(detail::size_class_of(in_class) == detail::size_class_of(same_class_smaller));
static_assert(detail::size_class_of(class_below) + 1 == detail::size_class_of(in_class));

TEST(GrowBeforeReclaim, ACachedLargeBlockServesSmallerRequestsOfItsClassAndTheClassBelow) {
  sim_pool_rig r(sim_options{.capacity_bytes = std::size_t{1} << 30, .auto_complete = true}, grow_first());
  void* a = r.allocate(in_class, default_alignment, stream_ref{});
  EXPECT_EQ(block_bytes_at(*r.p, a), in_class) << "a block from the arena has the size asked";
  r.deallocate(a, stream_ref{});
  const std::uint64_t slow = slow_allocations(*r.p);

  void* b = r.allocate(same_class_smaller, default_alignment, stream_ref{});
  EXPECT_EQ(b, a) << "the cached block of the same class serves it";
  EXPECT_EQ(slow_allocations(*r.p), slow) << "without the pool's slow path";
  EXPECT_EQ(r.p->stats().live_bytes, same_class_smaller) << "live bytes are what was asked, not the block";
  EXPECT_EQ(block_bytes_at(*r.p, b), in_class);
  r.model->check_full();
  r.deallocate(b, stream_ref{});

  void* c = r.allocate(class_below, default_alignment, stream_ref{});
  EXPECT_EQ(c, a) << "a block of the next class up serves it too";
  EXPECT_EQ(slow_allocations(*r.p), slow);
  EXPECT_EQ(r.p->stats().live_bytes, class_below);
  r.model->check_full();
  r.deallocate(c, stream_ref{});

  // A request larger than the cached block never gets it, even in the same class.
  void* d = r.allocate(in_class + 32 * KiB, default_alignment, stream_ref{});
  EXPECT_NE(d, a);
  EXPECT_EQ(block_bytes_at(*r.p, d), in_class + 32 * KiB);
  r.model->check_full();
  r.free_all_and_trim();
}

TEST(GrowBeforeReclaim, TheDefaultPolicyHandsOutLargeBlocksOfExactlyTheSizeAsked) {
  detail::pool_config po;  // large blocks cached per thread (no step plan), as with several threads
  gpumem::test::use_moving_policy(po);
  sim_pool_rig r(sim_options{.capacity_bytes = std::size_t{1} << 30, .auto_complete = true}, po);
  void* a = r.allocate(in_class, default_alignment, stream_ref{});
  r.deallocate(a, stream_ref{});
  const std::uint64_t slow = slow_allocations(*r.p);
  void* b = r.allocate(same_class_smaller, default_alignment, stream_ref{});
  EXPECT_EQ(slow_allocations(*r.p), slow + 1) << "only a cached block of exactly its size serves it";
  EXPECT_EQ(block_bytes_at(*r.p, b), same_class_smaller);
  r.deallocate(b, stream_ref{});
  void* c = r.allocate(same_class_smaller, default_alignment, stream_ref{});
  EXPECT_EQ(c, b) << "a block of exactly its size does";
  EXPECT_EQ(slow_allocations(*r.p), slow + 1);
  r.model->check_full();
  r.free_all_and_trim();
}

TEST(GrowBeforeReclaim, AStreamNeverGetsALargeBlockCachedForAnother) {
  // Events complete only when the test says so: a block freed on A may still be in use by A's
  // work, and the model rejects any handout to B that runs ahead of it.
  sim_pool_rig r(sim_options{.capacity_bytes = std::size_t{1} << 30}, grow_first());
  const stream_ref A = r.dev->create_stream(), B = r.dev->create_stream();
  void* a = r.allocate(in_class, default_alignment, A);
  r.deallocate(a, A);
  void* b = r.allocate(same_class_smaller, default_alignment, B);
  EXPECT_NE(b, a) << "B got a block A's work may still use";
  void* c = r.allocate(class_below, default_alignment, B);
  EXPECT_NE(c, a);
  void* d = r.allocate(same_class_smaller, default_alignment, A);
  EXPECT_EQ(d, a) << "A's own cached block serves A";
  r.model->check_full();
  r.free_all_and_trim();
}

TEST(GrowBeforeReclaim, CarvesARequestFromALargerCachedBlockBeforeGrowing) {
  // A 40 MiB block is freed into the front cache; a 24 MiB request (classes apart: no front cache
  // hit) would otherwise need new memory.
  sim_pool_rig r(sim_options{.capacity_bytes = std::size_t{1} << 30, .auto_complete = true}, grow_first());
  void* a = r.allocate(40 * MiB, default_alignment, stream_ref{});
  r.deallocate(a, stream_ref{});
  const pool_stats before = r.p->stats();
  const std::uint64_t slow = slow_allocations(*r.p);
  void* b = r.allocate(24 * MiB, default_alignment, stream_ref{});
  const pool_stats after = r.p->stats();
  EXPECT_EQ(slow_allocations(*r.p), slow + 1);
  EXPECT_EQ(after.reserved_bytes, before.reserved_bytes) << "no new memory";
  EXPECT_EQ(after.upstream_calls, before.upstream_calls);
  EXPECT_GE(after.largest_free_block_bytes, 16 * MiB) << "the rest of the block is free for any size";
  r.model->check_full();
  r.deallocate(b, stream_ref{});
  r.free_all_and_trim();
}

// A thread allocates 3 blocks of each of the 16 classes between 2 and 8 MiB, frees them while it
// keeps 8 times as many live, then asks for the same sizes again. Returns how many of those the
// front cache served.
// (The reserve headroom is off: it would let the front cache keep everything freed since the
// peak, whatever the share; pool_reserve_headroom_test.cpp.)
std::uint64_t large_hits_after_refree(double fraction) {
  detail::pool_config po = grow_first(fraction);
  po.front_cache_reserve_headroom = 0;
  sim_pool_rig r(sim_options{.capacity_bytes = std::size_t{4} << 30, .auto_complete = true}, po);
  std::vector<std::size_t> sizes;
  for (std::size_t c = detail::size_class_of(2 * MiB) + 1; c <= detail::size_class_of(8 * MiB); ++c)
    for (int k = 0; k < 3; ++k) sizes.push_back(detail::size_class_bytes(c) - 4 * KiB);
  std::vector<void*> kept, freed;
  for (int k = 0; k < 8; ++k)
    for (std::size_t n : sizes) kept.push_back(r.allocate(n, default_alignment, stream_ref{}));
  for (std::size_t n : sizes) freed.push_back(r.allocate(n, default_alignment, stream_ref{}));
  for (void* p : freed) r.deallocate(p, stream_ref{});
  const std::uint64_t hits = r.p->stats().front_hits;
  for (std::size_t n : sizes) r.allocate(n, default_alignment, stream_ref{});
  const std::uint64_t got = r.p->stats().front_hits - hits;
  r.model->check_full();
  r.free_all_and_trim();
  return got;
}

TEST(GrowBeforeReclaim, TheFrontCacheKeepsLargeBlocksUpToItsShareOfLiveMemory) {
  // 48 blocks of ~4.6 MiB (~220 MiB) are freed while ~1.8 GiB stay live: a quarter of live holds
  // them all; front_cache_bytes alone (32 MiB) holds a handful.
  const std::uint64_t shared = large_hits_after_refree(0.25);
  const std::uint64_t fixed = large_hits_after_refree(0.0);
  EXPECT_EQ(shared, 48u);
  EXPECT_LT(fixed, 16u);
}

TEST(GrowBeforeReclaim, CachedLargeBlocksAreReclaimedWhenTheDeviceIsFull) {
  // 256 MiB of device. 40 blocks of 4 MiB are held, half freed (a share of them stays in the front
  // cache); then 140 MiB more than growing can give is asked for in one block.
  sim_pool_rig r(sim_options{.capacity_bytes = 256 * MiB, .auto_complete = true}, grow_first());
  std::vector<void*> held;
  for (int i = 0; i < 40; ++i) held.push_back(r.allocate(4 * MiB, default_alignment, stream_ref{}));
  for (int i = 0; i < 40; i += 2) r.deallocate(held[static_cast<std::size_t>(i)], stream_ref{});
  void* big = nullptr;
  ASSERT_NO_THROW(big = r.allocate(140 * MiB, default_alignment, stream_ref{}));
  EXPECT_NE(big, nullptr);
  EXPECT_LE(r.p->stats().reserved_bytes, 256 * MiB);
  EXPECT_EQ(r.p->stats().failed_allocations, 0u);
  r.model->check_full();
  r.free_all_and_trim();
}

TEST(GrowBeforeReclaim, AccountingHoldsUnderLargeAndSmallTrafficOnSeveralStreams) {
  // Sizes 256 B - 64 MiB on three streams, frees sometimes on another stream, streams completing
  // now and then: the model checks every handout, all of its block (sim_pool_rig tells it a block's
  // real size), for overlap and stream safety, and the pool's live bytes (what was asked, not the
  // blocks) and invariants every 500 steps.
  sim_pool_rig r(sim_options{.capacity_bytes = std::size_t{8} << 30}, grow_first());
  stream_ref streams[3];
  for (auto& s : streams) s = r.dev->create_stream();
  rng g(4242);
  struct held_block { void* p; stream_ref s; };
  std::vector<held_block> live;
  for (int step = 0; step < 20000; ++step) {
    if (live.size() < 200 && (live.empty() || g.chance(52))) {
      const stream_ref s = streams[g.below(3)];
      const std::size_t bytes = gpumem::test::log_uniform(g.next(), g.next(), 256, 64 * MiB);
      live.push_back({r.allocate(bytes, default_alignment, s), s});
    } else {
      const auto k = g.below(live.size());
      r.deallocate(live[k].p, g.chance(85) ? live[k].s : streams[g.below(3)]);
      live[k] = live.back();
      live.pop_back();
    }
    if (g.chance(2)) r.dev->complete(streams[g.below(3)]);
    if (step % 500 == 0) {
      r.model->check_full();
      EXPECT_EQ(r.p->stats().live_bytes, r.model->live_bytes());
    }
  }
  r.model->check_full();
  EXPECT_GT(r.p->stats().front_hits, 0u);
  r.free_all_and_trim();
}

TEST(GrowBeforeReclaim, RejectsAFrontCacheGrowFractionThatIsNoFraction) {
  sim_device dev(sim_options{.capacity_bytes = 64 * MiB});
  for (const double bad : {-0.25, std::nan(""), 1e9}) {
    detail::pool_config po = grow_first(bad);
    EXPECT_THROW({ pool p(dev.memory(), dev.streams(), po, po); }, std::invalid_argument) << bad;
  }
}

}  // namespace

namespace {
// Large blocks cached while a thread's live bytes were high stay cached after they fall; they must
// not spend the small blocks' budget. Before slots and arena blocks were counted apart, every small
// free then went back to its slab and every small request refilled from there (on the shared
// traces, most small requests under either policy). Returns the refills
// a loop of small pairs cost after the large blocks were freed.
std::uint64_t refills_after_large_blocks_fell(const detail::pool_config& po) {
  sim_pool_rig r(sim_options{.capacity_bytes = std::size_t{4} << 30, .auto_complete = true}, po);
  std::vector<void*> large;
  for (std::size_t i = 0; i < 64; ++i) large.push_back(r.allocate((8 + i % 16) * MiB, default_alignment, stream_ref{}));
  for (void* p : large) r.deallocate(p, stream_ref{});
  EXPECT_GT(r.p->stats().reserved_bytes - r.p->stats().live_bytes, 32 * MiB) << "large blocks stay cached";
  // One request and its free first: the bin's first fill is a refill whatever the budget.
  r.deallocate(r.allocate(4 * KiB, default_alignment, stream_ref{}), stream_ref{});
  const std::uint64_t before = r.p->stats().front_refills;
  for (int i = 0; i < 1000; ++i) r.deallocate(r.allocate(4 * KiB, default_alignment, stream_ref{}), stream_ref{});
  const std::uint64_t refills = r.p->stats().front_refills - before;
  r.model->check_full();
  r.free_all_and_trim();
  return refills;
}
}  // namespace

TEST(GrowBeforeReclaim, CachedLargeBlocksLeaveTheSmallBlocksTheirBudget) {
  EXPECT_EQ(refills_after_large_blocks_fell(grow_first()), 0u)
      << "the freed small block stays in its bin and serves the next request";
}

TEST(GrowBeforeReclaim, CachedLargeBlocksLeaveTheSmallBlocksTheirBudgetByDefaultToo) {
  EXPECT_EQ(refills_after_large_blocks_fell(detail::pool_config{}), 0u)
      << "the freed small block stays in its bin and serves the next request";
}
