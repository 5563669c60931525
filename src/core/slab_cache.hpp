#pragma once
// Small objects: arena blocks carved into equal slots of one size class (the seed's pitfall 4:
// many small objects share one block instead of each costing a block and an index entry).
//
// A slab belongs to the stream that carved it. A slot freed on that stream goes straight back to
// the slab: the owner's later work is ordered after the free. A slot freed on another stream (or
// used on others through record_use) waits until each of those streams has run past its free.
// An empty slab is given back to the arena on its owner stream when the pool needs memory.
// Not thread-safe: the pool calls it under its lock.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "core/arena.hpp"
#include "core/size_class.hpp"
#include "core/stream_clock.hpp"

namespace gpumem::detail {

struct slab {
  std::uintptr_t base = 0;
  std::size_t bytes = 0;
  std::size_t cls = 0;
  std::size_t slot_bytes = 0;
  stream_ref owner = 0;
  std::uint32_t slots = 0;
  std::uint32_t live = 0;
  std::uint32_t waiting = 0;
  std::vector<std::uint32_t> free_slots;
  bool listed = false;  // in its (class, owner) list of slabs with free slots
};

class slab_cache {
 public:
  slab_cache(arena& a, stream_clock& clock, std::size_t small_max);
  ~slab_cache();
  std::size_t small_max() const noexcept { return small_max_; }

  // A slot of class `cls` for stream `s`; 0 if a new slab was needed and could not be had.
  std::uintptr_t allocate(std::size_t cls, stream_ref s, bool may_grow, slab*& from);
  void deallocate(slab* sl, std::uintptr_t addr, stream_ref s, const std::vector<stream_ref>& also_on);
  // Slots whose cross-stream frees are done go back to their slabs.
  void promote();
  // Stream `s` is going away (its work is done): its slabs pass to the default stream.
  void disown(stream_ref s);
  // Empty slabs go back to the arena; returns how many.
  std::size_t release_empty();

  std::size_t slab_total_bytes() const noexcept { return slab_bytes_; }
  // True if `addr` is a slot of some slab that is free or waiting: a pointer freed already.
  bool is_free_slot(std::uintptr_t addr) const;
  std::size_t slab_count() const noexcept { return slabs_.size(); }
  void check() const;

 private:
  struct key_hash {
    std::size_t operator()(const std::pair<std::size_t, stream_ref>& k) const noexcept {
      return std::hash<std::size_t>()(k.first * 0x9E3779B97F4A7C15ull ^ k.second);
    }
  };
  struct waiting_slot {
    slab* sl;
    std::uint32_t slot;
    std::vector<stream_mark> waits;
  };
  void list(slab* sl);
  void return_slot(slab* sl, std::uint32_t slot);

  arena& arena_;
  stream_clock& clock_;
  std::size_t small_max_;
  std::unordered_map<std::uintptr_t, std::unique_ptr<slab>> slabs_;  // by base
  std::unordered_map<std::pair<std::size_t, stream_ref>, std::vector<slab*>, key_hash> partial_;
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
