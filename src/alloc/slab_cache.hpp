#pragma once
// Small objects: arena blocks carved into equal slots of one size class (the seed's pitfall 4:
// many small objects share one block instead of each costing a block and an index entry).
//
// A slab belongs to the stream that carved it. A slot freed on that stream goes straight back to
// the slab: the owner's later work is ordered after the free. A slot freed on another stream (or
// used on others through record_use) waits until each of those streams has run past its free.
// An empty slab is given back to the arena on its owner stream when the pool needs memory.
//
// Locking. Everything here runs under the pool's lock except the two shard calls (take_free,
// put_back), which the front caches make under one stream's shard lock alone: each stream's slabs
// with free slots are listed in that stream's shard, and a slab's slot state (live, free_slots,
// listed) is guarded by its owner's shard lock. Threads on different streams therefore exchange
// batches of slots with their own stream's slabs without meeting on one lock. Lock order: the
// pool's lock, then a front cache's lock, then one shard lock; whoever holds a shard lock takes no
// other lock, and only holders of the pool's lock take more than one shard lock.
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "arena.hpp"
#include "size_class.hpp"
#include "stream_clock.hpp"

namespace gpumem::detail {

struct slab_shard;

// The shard lock: held for a batch of slot moves at a time, almost never contended (one stream,
// usually one thread): an exchange to take, a store to give back — cheaper than a mutex on both
// ends. Spins briefly, then yields (a holder preempted mid-batch must get to run).
class spin_lock {
 public:
  void lock() noexcept {
    for (int spins = 0; flag_.exchange(true, std::memory_order_acquire);)
      while (flag_.load(std::memory_order_relaxed)) {
        if (++spins < 128)
          __builtin_ia32_pause();
        else
          std::this_thread::yield();
      }
  }
  bool try_lock() noexcept {
    return !flag_.load(std::memory_order_relaxed) && !flag_.exchange(true, std::memory_order_acquire);
  }
  void unlock() noexcept { flag_.store(false, std::memory_order_release); }

 private:
  std::atomic<bool> flag_{false};
};

struct slab {
  std::uintptr_t base = 0;
  std::size_t bytes = 0;
  std::size_t cls = 0;
  std::size_t slot_bytes = 0;
  stream_ref owner = {};                // changes under the pool's lock and both shards' locks
  std::atomic<slab_shard*> shard{nullptr};  // the owner's shard: its lock guards the three below
  std::uint32_t slots = 0;
  std::uint32_t live = 0;               // slots out of the slab: callers' and front caches'
  std::uint32_t waiting = 0;            // slots freed on other streams, not yet back
  std::vector<std::uint32_t> free_slots;
  bool listed = false;   // in its owner shard's list of slabs with free slots of its class
  bool emptied = false;  // in its owner shard's list of slabs that became wholly free
  bool empty() const noexcept { return live == 0 && waiting == 0; }

  std::uint32_t slot_of(std::uintptr_t addr) const noexcept {
    return static_cast<std::uint32_t>((addr - base) / slot_bytes);
  }
};

// One stream's slabs that have free slots, by class, and the lock that guards their slot state.
struct slab_shard {
  spin_lock m;
  stream_ref stream = {};
  std::vector<std::vector<slab*>> partial;  // by class
  // Slabs that became wholly free while another slab of their class had free slots: the pool
  // gives them back to the arena at its next slow allocation (release_emptied), so an empty slab
  // does not sit on arena memory until the next reclaim.
  std::vector<slab*> emptied;
  std::atomic<bool> has_emptied{false};
};

class slab_cache {
 public:
  // `granule_aligned` (virtual memory, with the step plan): a slab of a granule's size is aligned
  // to one. Carved at any 256 B it straddles two granules, and once a plan's region has gathered
  // the large blocks around it, it pins both: that kept plans out of the reserve ceiling. Without
  // a plan its neighbours keep those granules mapped anyway, and an aligned slab's own granule,
  // idle whenever the slab empties, is one more to move.
  slab_cache(arena& a, stream_clock& clock, std::size_t small_max, bool granule_aligned);
  ~slab_cache();
  std::size_t small_max() const noexcept { return small_max_; }

  // Under the pool's lock (each takes the shard locks it needs) ---------------------------------
  // A slot of class `cls` for stream `s`; 0 if a new slab was needed and could not be had.
  std::uintptr_t allocate(std::size_t cls, stream_ref s, bool may_grow, slab*& from);
  void deallocate(slab* sl, std::uintptr_t addr, stream_ref s, const std::vector<stream_ref>& also_on);
  // Slots whose cross-stream frees are done go back to their slabs.
  void promote();
  // Stream `s` is going away (its work is done): its slabs pass to the default stream.
  void disown(stream_ref s);
  // Empty slabs go back to the arena; returns how many.
  std::size_t release_empty();
  // The slabs the shards noted as emptied go back to the arena, except the last of their class
  // and stream with free slots (kept, so a class that comes and goes does not churn slabs).
  void release_emptied();
  // Stream `s`'s shard; the pointer stays valid as long as the slab cache.
  slab_shard& shard_for(stream_ref s);

  // Under `sh.m` alone ----------------------------------------------------------------------------
  // Takes up to `n` free slots of class `cls` from the shard's slabs — slots already carved, so no
  // memory is added — and hands each to `sink(addr, slab*, slot)`. Returns how many.
  template <class Sink>
  static std::size_t take_free(slab_shard& sh, std::size_t cls, std::size_t n, Sink&& sink) {
    if (cls >= sh.partial.size()) return 0;
    auto& list = sh.partial[cls];
    std::size_t got = 0;
    while (got < n && !list.empty()) {
      slab* sl = list.back();
      while (got < n && !sl->free_slots.empty()) {
        const std::uint32_t slot = sl->free_slots.back();
        sl->free_slots.pop_back();
        ++sl->live;
        sink(sl->base + slot * sl->slot_bytes, sl, slot);
        ++got;
      }
      if (sl->free_slots.empty()) {
        sl->listed = false;
        list.pop_back();
      }
    }
    return got;
  }
  // A slot freed on the shard's stream goes back to its slab, if that slab is the stream's own;
  // false (nothing done) if the slab belongs to another stream (the pool's lock must decide).
  static bool put_back(slab_shard& sh, slab* sl, std::uint32_t slot) {
    if (sl->shard.load(std::memory_order_relaxed) != &sh) return false;
    --sl->live;
    sl->free_slots.push_back(slot);
    if (!sl->listed) list_in(sh, sl);
    note_if_emptied(sh, sl);
    return true;
  }

  std::size_t slab_total_bytes() const noexcept { return slab_bytes_; }
  // True if `addr` is a slot of some slab that is free or waiting: a pointer freed already.
  bool is_free_slot(std::uintptr_t addr) const;
  std::size_t slab_count() const noexcept { return slabs_.size(); }
  void check() const;

 private:
  struct waiting_slot {
    slab* sl;
    std::uint32_t slot;
    std::vector<stream_mark> waits;
  };
  static void list_in(slab_shard& sh, slab* sl) {
    if (sl->cls >= sh.partial.size()) sh.partial.resize(sl->cls + 1);
    sh.partial[sl->cls].push_back(sl);
    sl->listed = true;
  }
  static void unlist(slab_shard& sh, slab* sl);
  static void note_if_emptied(slab_shard& sh, slab* sl) {
    if (sl->empty() && !sl->emptied && sh.partial[sl->cls].size() > 1) {
      sl->emptied = true;
      sh.emptied.push_back(sl);
      sh.has_emptied.store(true, std::memory_order_relaxed);
    }
  }
  void release_slab(slab* sl);  // under the pool's lock; `sl` unlisted and empty
  // Under the slab's shard lock.
  static void return_slot(slab* sl, std::uint32_t slot);

  arena& arena_;
  stream_clock& clock_;
  std::size_t small_max_;
  bool granule_aligned_;
  std::unordered_map<std::uintptr_t, std::unique_ptr<slab>> slabs_;  // by base
  std::unordered_map<stream_ref, std::unique_ptr<slab_shard>> shards_;  // never erased
  std::vector<waiting_slot> waiting_;
  std::size_t slab_bytes_ = 0;  // bytes of all slabs
};

// Slab size for a class: 8 slots, at least 64 KiB (a small slab amortizes its arena block) and at
// most one 2 MiB granule unless one slot is bigger (a partly used slab of a big class pins little).
constexpr std::size_t slab_bytes_for(std::size_t slot_bytes) noexcept {
  constexpr std::size_t lo = std::size_t{64} << 10, hi = std::size_t{2} << 20;
  std::size_t want = slot_bytes * 8;
  if (want < lo) want = lo;
  if (want > hi) want = hi > slot_bytes ? hi : slot_bytes;
  return (want + class_unit - 1) / class_unit * class_unit;
}

}  // namespace gpumem::detail
