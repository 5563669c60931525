// The front cache's lock in both its modes: the asymmetric Dekker lock (where the kernel has
// membarrier) and the exchange-based fallback, which owner_try_lock reaches with no test of its own:
// a fallback lock keeps its foreign flag set from the start, so the owner's try always fails and
// the owner queues on the mutex. Each test fails if the owner could take the lock beside a foreign
// holder, or if one side could lose the other's increments.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "front_lock.hpp"

namespace {

using gpumem::detail::asymmetric_fence_available;
using gpumem::detail::front_lock;

class FrontLock : public ::testing::TestWithParam<bool> {};  // asymmetric asked for

TEST_P(FrontLock, ModeIsWhatWasAskedWhereTheKernelAllows) {
  front_lock l(GetParam());
  EXPECT_EQ(l.asymmetric(), GetParam() && asymmetric_fence_available());
}

TEST_P(FrontLock, OwnerTryTakesAFreeLockOnlyInTheAsymmetricMode) {
  front_lock l(GetParam());
  const bool took = l.owner_try_lock();
  EXPECT_EQ(took, l.asymmetric());
  if (took) l.owner_unlock_tried();
  // Whatever the try said, the owner's full lock works and leaves the lock free.
  l.owner_lock();
  l.owner_unlock();
  EXPECT_EQ(l.owner_try_lock(), l.asymmetric());
  if (l.asymmetric()) l.owner_unlock_tried();
}

TEST_P(FrontLock, OwnerTryFailsWhileAForeignThreadHoldsIt) {
  front_lock l(GetParam());
  l.lock();  // foreign side, on this thread: what matters is the lock's state
  EXPECT_FALSE(l.owner_try_lock());
  l.unlock();
  EXPECT_EQ(l.owner_try_lock(), l.asymmetric());
  if (l.asymmetric()) l.owner_unlock_tried();
}

TEST_P(FrontLock, OwnerAndForeignThreadsExcludeEachOther) {
  front_lock l(GetParam());
  constexpr int rounds = 20000;
  long counter = 0;  // plain: only the lock orders the two threads' increments
  std::atomic<bool> go{false};
  std::thread foreign([&] {
    while (!go.load()) std::this_thread::yield();
    for (int i = 0; i < rounds / 100; ++i) {
      l.lock();
      for (int k = 0; k < 100; ++k) ++counter;
      l.unlock();
    }
  });
  go.store(true);
  for (int i = 0; i < rounds; ++i) {
    if (l.owner_try_lock()) {
      ++counter;
      l.owner_unlock_tried();
    } else {
      l.owner_lock();
      ++counter;
      l.owner_unlock();
    }
  }
  foreign.join();
  EXPECT_EQ(counter, 2L * rounds);
}

INSTANTIATE_TEST_SUITE_P(Modes, FrontLock, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "Asymmetric" : "Fallback"; });

}  // namespace
