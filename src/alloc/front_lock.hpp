#pragma once
// The front cache's lock: nearly free for the thread that owns the front cache, costly for any
// other thread. The owner takes it on every allocate and free; other threads take it only on slow
// paths (a free of another thread's block, flushing caches under memory pressure, statistics).
//
// An asymmetric Dekker lock: the owner announces itself with a plain store and checks for a
// foreign claim with a plain load — no atomic read-modify-write, no fence. A foreign thread
// publishes its claim and then runs membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED), which makes
// every running thread of the process execute a full memory barrier: after it, either the owner's
// announcement is visible (the foreign thread waits for it to leave) or the owner will see the
// claim (and backs off to the foreign path). Where the kernel lacks membarrier, both sides fall
// back to an exchange-based lock.
#include <atomic>
#include <mutex>
#include <thread>

namespace gpumem::detail {

// True once the process is registered for expedited private membarriers (checked once).
bool asymmetric_fence_available() noexcept;
// The heavy side of the asymmetric fence. Only called when asymmetric_fence_available().
void heavy_fence() noexcept;

class front_lock {
 public:
  // `asymmetric`: use the asymmetric fence (where the kernel has it); false, the exchange-based
  // fallback everywhere (what a kernel without membarrier gets, and what the tests can ask for).
  explicit front_lock(bool asymmetric = asymmetric_by_default()) noexcept
      : asymmetric_(asymmetric && asymmetric_fence_available()), foreign_(!asymmetric_) {}
  front_lock(const front_lock&) = delete;
  front_lock& operator=(const front_lock&) = delete;
  bool asymmetric() const noexcept { return asymmetric_; }

  // Owner side, the common path only: true with the lock held, when the asymmetric fence is there
  // and no foreign thread holds or wants the lock; else false, and nothing held. It calls nothing,
  // so the common allocate and free inline it whole (pool.cpp, pool::allocate) and go on to the
  // general path, which takes owner_lock, when it fails.
  [[gnu::always_inline]] bool owner_try_lock() noexcept {
    // Without the asymmetric fence foreign_ stays set from the start (below), so this fails here
    // and the owner queues on the mutex: no test of asymmetric_ on the common path.
    owner_in_.store(true, std::memory_order_relaxed);
    std::atomic_signal_fence(std::memory_order_seq_cst);  // keep the store before the load
    if (!foreign_.load(std::memory_order_acquire)) [[likely]]
      return true;
    owner_in_.store(false, std::memory_order_release);
    return false;
  }
  // Releases what owner_try_lock took.
  [[gnu::always_inline]] void owner_unlock_tried() noexcept { owner_in_.store(false, std::memory_order_release); }
  // Owner side. Returns with the lock held.
  void owner_lock() noexcept {
    if (owner_try_lock()) return;
    // A foreign thread holds or wants it (or there is no asymmetric fence): queue on the mutex. No
    // heavy fence: the mutex alone keeps foreign threads out while the owner holds it, and a fence
    // here, taken by every owner that met a flush, interrupted every core once per owner.
    m_.lock();
    owner_took_slow_ = true;
  }
  void owner_unlock() noexcept {
    if (owner_took_slow_) {
      owner_took_slow_ = false;
      m_.unlock();
      return;
    }
    owner_unlock_tried();
  }

  // Foreign side for many locks at once (the pool's lock held, so no other thread does this):
  // one heavy fence covers them all, where lock() one by one would cost one each — and each
  // interrupts every core that runs a thread of the process.
  template <class Range, class Get>
  static void lock_all(const Range& r, Get&& get) noexcept {
    bool fence = false;
    for (const auto& x : r) {
      front_lock& l = get(x);
      l.m_.lock();
      if (l.asymmetric_) {
        l.foreign_.store(true, std::memory_order_relaxed);
        fence = true;
      }
    }
    if (fence) heavy_fence();
    for (const auto& x : r) {
      front_lock& l = get(x);
      if (l.asymmetric_) l.wait_for_owner();
    }
  }

  // Foreign side (and the fallback).
  void lock() noexcept {
    m_.lock();
    if (asymmetric_) {
      foreign_.store(true, std::memory_order_relaxed);
      heavy_fence();
      wait_for_owner();
    }
  }
  void unlock() noexcept {
    if (asymmetric_) foreign_.store(false, std::memory_order_release);
    m_.unlock();
  }

 private:
  // The owner's critical sections are a few hundred instructions; if it does not leave soon it was
  // preempted in one, and spinning on would keep it from running (more threads than cores).
  void wait_for_owner() noexcept {
    for (int spins = 0; owner_in_.load(std::memory_order_acquire); ++spins) {
      if (spins < 128)
        __builtin_ia32_pause();
      else
        std::this_thread::yield();
    }
  }
  static constexpr bool asymmetric_by_default() noexcept {
#if defined(__SANITIZE_THREAD__)
    // ThreadSanitizer cannot see membarrier's ordering: take the plain lock so it checks the rest.
    return false;
#else
    return true;
#endif
  }
  const bool asymmetric_;
  std::atomic<bool> owner_in_{false};
  // A foreign claim; always set without the asymmetric fence (lock and unlock then leave it be),
  // so owner_try_lock never succeeds there. owner_in_ is then stored but never read.
  std::atomic<bool> foreign_;
  bool owner_took_slow_ = false;  // touched only by the owner thread
  std::mutex m_;
};

// RAII: the owner side when `owner` (the calling thread owns the front cache), else the foreign one.
class front_guard {
 public:
  front_guard(front_lock& l, bool owner) noexcept : l_(l), owner_(owner) { owner_ ? l_.owner_lock() : l_.lock(); }
  ~front_guard() { owner_ ? l_.owner_unlock() : l_.unlock(); }
  front_guard(const front_guard&) = delete;
  front_guard& operator=(const front_guard&) = delete;

 private:
  front_lock& l_;
  bool owner_;
};

}  // namespace gpumem::detail
