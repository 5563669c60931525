// Thread stress (Reliability 4): 16 threads, each with its own simulated stream, allocate and free
// through the shadow model; a quarter of the blocks are handed to another thread through a queue
// and freed there on that thread's stream (a cross-stream free). Threads complete their own stream
// now and then. GPUMEM_STRESS_OPS sets the total operation count (default 200,000 so sanitizer
// runs fit; 10^7 for the long run). Invariants are checked at the end and by thread 0 as it goes.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <deque>
#include <mutex>
#include <thread>
#include <tuple>
#include <vector>

#include <fmt/format.h>

#include "support/pool_model.hpp"

namespace {

using namespace gpumem;
using gpumem::test::rng;
using gpumem::test::sim_pool_rig;

std::uint64_t total_ops() {
  if (const char* e = std::getenv("GPUMEM_STRESS_OPS")) return std::strtoull(e, nullptr, 10);
  return 200000;
}

// (virtual memory, grow_before_reclaim). Growing first, a request that would grow takes back what
// other threads' front caches keep for its stream (take_back_others): their locks taken from this
// thread while they run.
class ThreadStress : public ::testing::TestWithParam<std::tuple<bool, bool>> {};

TEST_P(ThreadStress, SixteenThreadsWithCrossStreamFrees) {
  constexpr int threads = 16;
  detail::pool_config po;
  po.grow_before_reclaim = std::get<1>(GetParam());
  sim_pool_rig r(sim_options{.capacity_bytes = std::size_t{4} << 30, .virtual_memory = std::get<0>(GetParam())}, po);
  std::vector<stream_ref> streams(threads);
  for (auto& s : streams) s = r.dev->create_stream();
  struct mailbox {
    std::mutex m;
    std::deque<void*> q;
  };
  std::vector<mailbox> boxes(threads);
  std::atomic<bool> failed{false};
  std::mutex err_m;
  std::string err;
  const std::uint64_t per_thread = total_ops() / threads;

  auto body = [&](int t) {
    rng g(1000 + static_cast<std::uint64_t>(t));
    const stream_ref mine = streams[static_cast<std::size_t>(t)];
    std::vector<void*> held;
    try {
      for (std::uint64_t i = 0; i < per_thread && !failed.load(std::memory_order_relaxed); ++i) {
        const auto op = g.below(100);
        if (op < 50 && held.size() < 64) {
          const std::size_t bytes = gpumem::test::log_uniform(g.next(), g.next(), 1, std::size_t{8} << 20);
          try {
            held.push_back(r.allocate(bytes, g.chance(90) ? 256 : std::size_t{1} << g.below(22), mine));
          } catch (const out_of_memory&) {
          }
        } else if (op < 85 && !held.empty()) {
          const auto k = g.below(held.size());
          void* p = held[k];
          held[k] = held.back();
          held.pop_back();
          if (g.chance(25)) {  // hand it to another thread, which frees it on its stream
            auto& b = boxes[static_cast<std::size_t>(g.below(threads))];
            std::lock_guard lock(b.m);
            b.q.push_back(p);
          } else {
            r.deallocate(p, mine);
          }
        } else if (op < 95) {
          std::deque<void*> got;
          {
            auto& b = boxes[static_cast<std::size_t>(t)];
            std::lock_guard lock(b.m);
            got.swap(b.q);
          }
          for (void* p : got) r.deallocate(p, mine);
        } else if (op < 99) {
          r.dev->complete(mine);
        } else if (t == 0) {
          r.p->check_invariants();  // the model's byte totals match only when all threads are quiet
        }
      }
      for (void* p : held) r.deallocate(p, mine);
    } catch (const std::exception& e) {
      std::lock_guard lock(err_m);
      if (err.empty()) err = fmt::format("thread {}: {}", t, e.what());
      failed = true;
    }
  };
  std::vector<std::thread> pool_threads;
  for (int t = 0; t < threads; ++t) pool_threads.emplace_back(body, t);
  for (auto& th : pool_threads) th.join();
  ASSERT_FALSE(failed.load()) << err;
  for (auto& b : boxes)
    for (void* p : b.q) r.deallocate(p, stream_ref{});
  r.free_all_and_trim();
  EXPECT_EQ(r.p->stats().live_bytes, 0u);
  EXPECT_EQ(r.dev->used_bytes(), 0u);
}

INSTANTIATE_TEST_SUITE_P(Pool, ThreadStress, ::testing::Combine(::testing::Bool(), ::testing::Bool()),
                         [](const auto& info) {
                           return std::string(std::get<0>(info.param) ? "Virtual" : "Segments") +
                                  (std::get<1>(info.param) ? "GrowFirst" : "");
                         });

}  // namespace
