// pool_options::grow_before_reclaim: the pool grows before it empties front caches and gives back
// empty slabs, and still reclaims — rather than fail — when growing is refused. The default keeps
// the tight policy: caching never makes the pool grow.
#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "support/pool_model.hpp"

namespace {

using namespace gpumem;
using gpumem::test::rng;
using gpumem::test::sim_pool_rig;
using gpumem::test::KiB;
using gpumem::test::MiB;


// Blocks of one small class are allocated and freed (their slabs stay, partly in the front cache),
// then blocks of another class need new slabs. Returns reserved bytes after the second phase.
std::size_t reserved_after_class_switch(bool grow_first) {
  pool_options po;
  po.grow_before_reclaim = grow_first;
  sim_pool_rig r(sim_options{.capacity_bytes = std::size_t{1} << 30, .auto_complete = true}, po);
  std::vector<void*> held;
  for (int i = 0; i < 64; ++i) held.push_back(r.allocate(200 * KiB, default_alignment, 0));
  for (void* p : held) r.deallocate(p, 0);
  held.clear();
  for (int i = 0; i < 64; ++i) held.push_back(r.allocate(100 * KiB, default_alignment, 0));
  r.model->check_full();
  const std::size_t reserved = r.p->stats().reserved_bytes;
  for (void* p : held) r.deallocate(p, 0);
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
  pool_options po;
  po.grow_before_reclaim = true;
  sim_pool_rig r(sim_options{.capacity_bytes = 32 * MiB, .auto_complete = true}, po);
  std::vector<void*> held;
  for (int i = 0; i < 100; ++i) held.push_back(r.allocate(200 * KiB, default_alignment, 0));
  for (void* p : held) r.deallocate(p, 0);
  ASSERT_GT(r.p->stats().reserved_bytes, 16 * MiB);
  void* big = nullptr;
  ASSERT_NO_THROW(big = r.allocate(24 * MiB, default_alignment, 0));
  EXPECT_LE(r.p->stats().reserved_bytes, 32 * MiB);
  EXPECT_EQ(r.p->stats().failed_allocations, 0u);
  r.model->check_full();
  r.deallocate(big, 0);
  r.free_all_and_trim();
}

TEST(GrowBeforeReclaim, ReclaimsAtThePoolsOwnLimit) {
  // The same with the limit set by max_reserved_bytes instead of the device.
  pool_options po;
  po.grow_before_reclaim = true;
  po.max_reserved_bytes = 32 * MiB;
  sim_pool_rig r(sim_options{.capacity_bytes = std::size_t{1} << 30, .auto_complete = true}, po);
  std::vector<void*> held;
  for (int i = 0; i < 100; ++i) held.push_back(r.allocate(200 * KiB, default_alignment, 0));
  for (void* p : held) r.deallocate(p, 0);
  void* big = nullptr;
  ASSERT_NO_THROW(big = r.allocate(24 * MiB, default_alignment, 0));
  EXPECT_LE(r.p->stats().peak_reserved_bytes, 32 * MiB);
  r.model->check_full();
  r.deallocate(big, 0);
  r.free_all_and_trim();
}

// A 30 MiB block is freed (its granules stay mapped and idle), then a 36 MiB one is asked for while
// a 4 MiB block bounds the hole. Returns the pool's stats after that.
pool_stats after_idle_granules(bool grow_first, std::size_t capacity) {
  pool_options po;
  po.grow_before_reclaim = grow_first;
  sim_pool_rig r(sim_options{.capacity_bytes = capacity, .auto_complete = true}, po);
  void* a = r.allocate(30 * MiB, default_alignment, 0);
  void* c = r.allocate(4 * MiB, default_alignment, 0);
  r.deallocate(a, 0);
  void* b = r.allocate(36 * MiB, default_alignment, 0);
  r.model->check_full();
  const pool_stats st = r.p->stats();
  r.deallocate(b, 0);
  r.deallocate(c, 0);
  r.free_all_and_trim();
  return st;
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
  pool_options po;
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

}  // namespace
