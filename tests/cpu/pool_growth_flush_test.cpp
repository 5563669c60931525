// Before it grows, a pool used by several threads flushes the other threads' front caches only once
// it has grown by 1/16 of its reserve since the last flush (pool.cpp, growth_between_full_flushes):
// a flush per growth stopped threads from scaling. These tests pin down what that may cost in
// memory — another thread's cache is reused within that slack, never kept while the pool grows
// without bound — and that a pool one thread uses still flushes before every growth.
#include <gtest/gtest.h>

#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "support/pool_model.hpp"

namespace {

using namespace gpumem;
using gpumem::test::sim_pool_rig;

constexpr std::size_t MiB = std::size_t{1} << 20;
constexpr std::size_t block = 3 * MiB;  // an arena block (over small_max), cached whole by a front

pool_options big_front_caches() {
  pool_options po;
  po.front_cache_bytes = std::size_t{256} << 20;
  return po;
}

// Thread A allocates `cached_blocks` blocks, frees them (into its front cache) and waits, alive,
// while `body` runs on this thread; then A ends.
template <class Body>
void with_a_thread_caching(sim_pool_rig& r, int cached_blocks, Body body) {
  std::mutex m;
  std::condition_variable cv;
  bool cached = false, done = false;
  std::thread a([&] {
    std::vector<void*> mine;
    for (int i = 0; i < cached_blocks; ++i) mine.push_back(r.allocate(block, default_alignment, 0));
    for (void* p : mine) r.deallocate(p, 0);
    std::unique_lock lock(m);
    cached = true;
    cv.notify_all();
    cv.wait(lock, [&] { return done; });
  });
  {
    std::unique_lock lock(m);
    cv.wait(lock, [&] { return cached; });
  }
  body();
  {
    std::lock_guard lock(m);
    done = true;
  }
  cv.notify_all();
  a.join();
}

TEST(GrowthFlush, AnotherThreadsCacheIsReusedWithinASixteenthOfTheReserve) {
  sim_pool_rig r(sim_options{.capacity_bytes = std::size_t{64} << 30, .auto_complete = true}, big_front_caches());
  constexpr int a_blocks = 32, b_blocks = 200;  // A caches 96 MiB; B asks for 600 MiB
  std::vector<void*> held;
  std::size_t reserved_after = 0;
  with_a_thread_caching(r, a_blocks, [&] {
    for (int i = 0; i < b_blocks; ++i) held.push_back(r.allocate(block, default_alignment, 0));
    reserved_after = r.p->stats().reserved_bytes;
    r.model->check_full();
  });
  const std::size_t b_live = b_blocks * block, a_cached = a_blocks * block;
  EXPECT_LT(reserved_after, b_live + a_cached) << "A's cached blocks were never reused";
  EXPECT_LE(reserved_after, b_live + b_live / 16 + 2 * default_granularity)
      << "the pool grew past the slack while another thread's cache held memory";
  for (void* p : held) r.deallocate(p, 0);
  r.free_all_and_trim();
}

TEST(GrowthFlush, APoolOneThreadUsesFlushesBeforeEveryGrowth) {
  sim_pool_rig r(sim_options{.capacity_bytes = std::size_t{64} << 30, .auto_complete = true}, big_front_caches());
  std::vector<void*> first;
  for (int i = 0; i < 32; ++i) first.push_back(r.allocate(block, default_alignment, 0));
  for (void* p : first) r.deallocate(p, 0);  // 96 MiB now sits in this thread's front cache
  const std::size_t reserved_before = r.p->stats().reserved_bytes;
  // Other sizes: the cache cannot serve them, the pool must grow — and flushes first, so the
  // cached blocks' memory serves them and reserved hardly moves.
  std::vector<void*> second;
  for (int i = 0; i < 20; ++i) second.push_back(r.allocate(block + MiB, default_alignment, 0));
  EXPECT_LE(r.p->stats().reserved_bytes, reserved_before + 2 * default_granularity);
  for (void* p : second) r.deallocate(p, 0);
  r.free_all_and_trim();
}

}  // namespace
