// lockstep_threads runs steps one at a time, in order, each on its assigned worker thread; the
// replay's recorded_threads uses it to issue each row on the thread of the trace that made it.
#include <gtest/gtest.h>

#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

#include "lockstep_threads.hpp"
#include "gpumem/replay.hpp"
#include "gpumem/trace.hpp"

namespace {

using gpumem::detail::lockstep_threads;

TEST(LockstepThreads, EachStepRunsInOrderOnItsWorker) {
  const std::vector<std::uint32_t> worker_of = {0, 1, 1, 2, 0, 2, 2, 1, 0};
  lockstep_threads runner(worker_of);
  for (int run = 0; run < 2; ++run) {  // a second run, as a replay's second pass
    std::vector<std::size_t> order;
    std::vector<std::thread::id> thread_of;
    runner.run([&](std::size_t i) {
      order.push_back(i);
      thread_of.push_back(std::this_thread::get_id());
    });
    ASSERT_EQ(order.size(), worker_of.size());
    for (std::size_t i = 0; i < order.size(); ++i) {
      EXPECT_EQ(order[i], i);
      EXPECT_NE(thread_of[i], std::this_thread::get_id()) << "step " << i << " ran on the caller";
      for (std::size_t j = 0; j < i; ++j)
        EXPECT_EQ(thread_of[i] == thread_of[j], worker_of[i] == worker_of[j]) << "steps " << j << " and " << i;
    }
  }
}

TEST(LockstepThreads, AStepsExceptionStopsTheRunAndReachesTheCaller) {
  lockstep_threads runner({0, 1, 0, 1});
  std::vector<std::size_t> ran;
  EXPECT_THROW(runner.run([&](std::size_t i) {
                 ran.push_back(i);
                 if (i == 1) throw std::runtime_error("step 1 failed");
               }),
               std::runtime_error);
  EXPECT_EQ(ran, (std::vector<std::size_t>{0, 1})) << "no step after the failed one";
  ran.clear();
  runner.run([&](std::size_t i) { ran.push_back(i); });
  EXPECT_EQ(ran, (std::vector<std::size_t>{0, 1, 2, 3})) << "the runner still works";
}

// Thread 1 frees a small block, thread 2 then asks for one of the same class: on one thread the
// front cache serves it; on the recorded threads it is another thread's front cache, which
// cannot.
TEST(LockstepThreads, RecordedThreadsReplayEachThreadWithItsOwnFrontCache) {
  gpumem::trace t;
  t.name = "two threads";
  using gpumem::trace_action;
  t.records = {{1, -1, trace_action::allocate, 0x1000, 4096, 0},
               {1, -1, trace_action::free, 0x1000, 4096, 0},
               {2, -1, trace_action::allocate, 0x2000, 4096, 0},
               {2, -1, trace_action::free, 0x2000, 4096, 0}};
  t.lines = {2, 3, 4, 5};
  gpumem::replay_options o;
  o.capacity_bytes = std::size_t{1} << 30;
  const gpumem::replay_result one = gpumem::replay(t, o);
  o.recorded_threads = true;
  const gpumem::replay_result two = gpumem::replay(t, o);
  EXPECT_EQ(one.stats.front_hits, 1u) << "one thread: the second request finds the first block cached";
  EXPECT_EQ(two.stats.front_hits, 0u) << "thread 2's front cache is its own";
  EXPECT_EQ(one.failed_allocs + two.failed_allocs, 0u);
}

}  // namespace
