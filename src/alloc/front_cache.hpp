#pragma once
// The front cache: per-thread, per-stream bins of freed blocks, and the thread's table of the
// allocations it handed out. The common allocate/free touches only the calling thread's front
// cache, whose lock no other thread takes in the common case (front_lock.hpp): no shared cache
// line, no atomic read-modify-write, so threads scale.
//
// Bins are by size class (8 per doubling, size_class.hpp). A small request is rounded to its class
// before it reaches the front cache, so every slot of that class serves it; a large one (an arena
// block, 256 B steps) takes only a block of exactly its size by default. Growing first
// (pool_tuning::grow_before_reclaim) it also takes a larger block of its class or of the next two
// (pop_fit): large sizes seldom repeat exactly, and that policy would rather hand out a block a
// little too large than take the pool's lock for the arena's best fit. A freed arena block that
// finds its bin full or the arena blocks' budget spent makes room: the oldest cached arena blocks
// go back to the arena (pool_front.cpp, make_room), since the shapes a job frees now are those it asks
// for next. Every block the front cache holds, live or cached, has one record (block_rec) for its
// whole stay, found by address in
// `index`: the common allocate pops a record from a bin and marks it live, the common free finds
// it, checks it and pushes it back; the index changes only when a block enters or leaves the front
// cache.
// A bin holds at most bin_limit_for(size) blocks. When it runs dry the pool refills it with a batch
// of free slots from its stream's slabs, and when it overflows hands the older half back, each
// batch under one shard lock (slab_cache.hpp), not the pool's lock: threads on different streams
// share no lock at all.
//
// Why it stays correct with streams: a block enters the bin of the stream it was freed on, and a
// bin serves only requests on that same stream. Work on one stream runs in order, so the new
// owner's work cannot start before the old owner's work on that stream has finished. A refill
// takes only free slots of slabs the bin's stream owns, which that stream may use at once (a slot
// freed on another stream reaches its slab only after the stream clock says so), and a trimmed
// slot goes back only to a slab its bin's stream owns, as a free on that stream; any other block
// leaves a bin only through the pool's lock. A block never leaves a bin for another stream: when
// the pool flushes a front cache (pressure, trim, its thread's end), or a newer block needs an
// arena block's room, each block goes back to the slab cache or arena as freed on its bin's
// stream, and from there the stream clock's events decide when other streams may have it.
#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "front_lock.hpp"
#include "pointer_map.hpp"
#include "size_class.hpp"
#include "gpumem/core.hpp"

namespace gpumem::detail {

struct slab;
struct slab_shard;

// What the pool knows of one live allocation: a copy taken on the slow paths.
struct live_entry {
  std::size_t bytes = 0;        // as requested
  std::size_t block_bytes = 0;  // what the block really is: a slot's size or an arena block's
  stream_ref stream = {};       // the allocating stream
  slab* sl = nullptr;           // the slot's slab; nullptr: an arena block
  std::uint32_t slot = 0;       // the slot's index in `sl`
  std::uint16_t bin = 0;        // bin_of(block_bytes)
  std::uint8_t align_log2 = 8;  // as requested (at least 256)
  bool used_elsewhere = false;  // record_use named another stream: never cached in a bin
  std::size_t alignment() const noexcept { return std::size_t{1} << align_log2; }
};

// A block a front cache holds: a caller's (live) or waiting in a bin (cached). The record stays
// while the block moves between the two, so the common allocate and free touch it in place and the
// address index changes only when a block enters or leaves the front cache.
enum rec_state : std::uint8_t { rec_unused = 0, rec_live = 1, rec_cached = 2, rec_used_elsewhere = 0x80 };

struct block_rec {
  std::uintptr_t addr = 0;
  std::size_t block_bytes = 0;  // a slot's size or an arena block's (multiple of 256)
  slab* sl = nullptr;           // the slot's slab; nullptr: an arena block
  union {
    std::size_t bytes = 0;    // live: as requested
    std::uint64_t cached_at;  // cached arena block: its front cache's fast_frees when it came in (its age)
  };
  stream_ref stream = {};       // live: the allocating stream
  std::uint32_t slot = 0;       // the slot's index in `sl`
  std::uint16_t bin = 0;        // bin_of(block_bytes)
  std::uint8_t align_log2 = 8;  // live: as requested (at least 256)
  std::uint8_t state = rec_unused;  // rec_live (| rec_used_elsewhere) or rec_cached

  bool live() const noexcept { return (state & ~rec_used_elsewhere) == rec_live; }
  std::size_t alignment() const noexcept { return std::size_t{1} << align_log2; }
  live_entry entry() const noexcept {
    return {bytes, block_bytes, stream, sl, slot, bin, align_log2, (state & rec_used_elsewhere) != 0};
  }
};

// Classes for bins: the small ones, then 8 per doubling, up to 2^47 bytes.
inline std::size_t bin_of(std::size_t size) noexcept { return size_class_of(size); }
// Bins per stream: one for every class a plausible request (at most 2^47 bytes) can have, so the
// common path indexes them with no bounds test.
inline constexpr std::size_t bin_count = size_class_of(std::size_t{1} << 47) + 1;

// Most blocks one bin keeps: about 400 / cbrt(size), 2 to 32. A bin's count moves like a random
// walk when sizes come and go at random; refilling and trimming to half the limit makes the walk
// last about (limit/2)^2 steps between two batches, and this shape spends a fixed byte budget where
// it buys the most steps (far fewer batches than 32 blocks of every class under the same budget).
// Arena blocks (over 1 MiB) keep 32 by default, where the byte budget binds first. Growing first,
// where large blocks may fill a share of live memory (pool_impl.hpp, cache_budget), 16 / sqrt(MiB),
// 2 to 16: a class of blocks is asked for about as often as another, and a smaller block costs
// less memory for the same requests served (the same reasoning as above): fewer requests go to
// the pool's lock, at less reserved memory, than with 32 of every class.
inline std::uint32_t bin_limit_for(std::size_t block_bytes, bool grow_first = false) noexcept {
  if (block_bytes > (std::size_t{1} << 20)) {
    if (!grow_first) return 32;
    const double lim = 16.0 / std::sqrt(static_cast<double>(block_bytes) / double(std::size_t{1} << 20));
    return static_cast<std::uint32_t>(std::clamp(lim, 2.0, 16.0));
  }
  const double lim = 400.0 / std::cbrt(static_cast<double>(block_bytes));
  return static_cast<std::uint32_t>(std::clamp(lim, 2.0, 32.0));
}

// One cached block in a bin: its address beside its record's index. The common allocate returns
// the address read here, so the caller gets it one load sooner than through the record (whose
// fields it writes, and whose size it checks, beside that path rather than on it); the common free
// stores the address it was given. A warm alloc+free pair is one chain of dependent loads, each
// waiting for the last, and this (with rec_ref below) takes a link out of each half. It costs a
// few instructions a pair (16 B items need a shift to index), and saves more time than that
// where the pair is bound by its loads rather than its instructions.
struct bin_item {
  std::uintptr_t addr = 0;
  std::uint32_t rec = 0;
};

// What the front cache's address index holds for a block: its record and its bin. The bin is the
// record's, which never changes while the block stays (adopt to forget), so the common free finds
// the bin to push into from the index without waiting for the record.
struct rec_ref {
  std::uint32_t rec = 0;
  std::uint16_t bin = 0;
};

// One class's cached blocks for one stream, newest last.
struct bin {
  std::unique_ptr<bin_item[]> items;
  std::uint32_t count = 0;
  std::uint32_t limit = 0;  // 0: not set up yet

  // Raises the limit to `most` (if that is more), keeping the blocks and their order.
  void widen(std::uint32_t most) {
    if (most <= limit) return;
    auto wider = std::make_unique<bin_item[]>(most);
    std::copy(items.get(), items.get() + count, wider.get());
    items = std::move(wider);
    limit = most;
  }
};

// Bins of one stream in one front cache.
struct stream_bins {
  stream_ref stream = {};
  // Cached bytes by budget: held[0] slots, held[1] arena blocks, each kind with a budget of its own
  // (pool_impl.hpp, cache_budget). With one budget for both, the large blocks a thread cached while
  // its live bytes were high would fill it, and then every small free would go back to its slab
  // and nearly every small request refill from there.
  std::size_t held[2] = {0, 0};
  // Which of `held` block `r` counts in (branch-free: the free's fast path computes it).
  static std::size_t budget_of(const block_rec& r) noexcept { return std::size_t{r.sl == nullptr}; }
  std::size_t cached_bytes() const noexcept { return held[0] + held[1]; }
  slab_shard* shard = nullptr;  // the stream's slab shard, once the pool has looked it up
  std::array<bin, bin_count> bins{};  // by bin_of (small and large share the index); set up when first used
  std::uint32_t sweep_backoff = 0;  // over-budget frees left before the next sweep of all bins
  bool grow_first = false;          // the pool's grow_before_reclaim: see bin_limit_for

  bin& bin_at(std::size_t b) {
    if (bins[b].limit) [[likely]]
      return bins[b];
    return set_up(b);
  }

 private:
  [[gnu::noinline]] bin& set_up(std::size_t b) {
    bin& x = bins[b];
    x.limit = bin_limit_for(size_class_bytes(b), grow_first);
    x.items = std::make_unique<bin_item[]>(x.limit);
    return x;
  }
};

class alignas(64) front_cache {
 public:
  static constexpr std::uint32_t none = ~std::uint32_t{0};

  explicit front_cache(bool grow_first = false) : grow_first_(grow_first) {}

  front_lock lock;  // see front_lock.hpp: cheap for the owning thread
  pointer_map<rec_ref> index;  // address -> record (and bin), for every live and cached block
  std::vector<block_rec> recs;
  std::vector<std::uint32_t> spare_recs;
  std::vector<stream_bins> streams;
  std::size_t live_bytes = 0;      // exact, under `lock`
  std::ptrdiff_t unpublished = 0;  // live bytes not yet added to the pool's shared counter
  std::size_t peak_live = 0;       // this front's own peak: the pool's, while it is the only one
  std::uint64_t hits = 0, fast_frees = 0;  // served / taken back without the pool's lock
  std::uint64_t refills = 0;               // of the hits, from the stream's slabs (pool_stats::front_refills)
  std::uint64_t evictions = 0;             // cached arena blocks that made room for newer ones (pool_stats::front_evictions)
  // About how many bytes of arena blocks this front cache keeps in its bins, for other threads to
  // read without its lock: before the pool grows for a large request it takes back the large
  // blocks another thread's front cache sits on (pool_reclaim.cpp, take_back_others). It is the held[1]
  // of the stream whose bin last took an arena block (so with one stream, what it held then),
  // stored by the free that pushed it: one plain store on that path, none on the allocation's
  // (a sum kept exact on both would cost every large alloc+free pair several instructions). It
  // runs ahead of the truth while the thread takes blocks back out; the pool then looks, under
  // the cache's lock, and finds less.
  std::atomic<std::size_t> arena_cached_bytes{0};

  // The live block at `a`, or nullptr.
  block_rec* find_live(std::uintptr_t a) noexcept {
    const rec_ref* i = index.find(a);
    return i && recs[i->rec].live() ? &recs[i->rec] : nullptr;
  }
  // Cached block `i`, out of its bin, becomes the caller's: `bytes` requested on `s` at
  // 2^align_log2. Returns its record (the caller accounts the live bytes to the pool).
  [[gnu::always_inline]] block_rec& hand_out(std::uint32_t i, std::size_t bytes, stream_ref s,
                                             std::uint8_t align_log2) noexcept {
    block_rec& r = recs[i];
    r.bytes = bytes;
    r.stream = s;
    r.align_log2 = align_log2;
    r.state = rec_live;
    live_bytes += bytes;
    return r;
  }
  // A block enters the front cache (live or cached); returns its record.
  std::uint32_t adopt(const block_rec& r) {
    std::uint32_t i;
    if (!spare_recs.empty()) {
      i = spare_recs.back();
      spare_recs.pop_back();
      recs[i] = r;
    } else {
      i = static_cast<std::uint32_t>(recs.size());
      recs.push_back(r);
    }
    index.insert(r.addr, {i, r.bin});
    if (!r.sl) note_arena_block(r.bin, +1);
    return i;
  }
  // A block leaves the front cache.
  void forget(std::uint32_t i) noexcept {
    index.erase(recs[i].addr);
    if (!recs[i].sl) note_arena_block(recs[i].bin, -1);
    recs[i].state = rec_unused;
    spare_recs.push_back(i);
  }

  stream_bins& bins_for(stream_ref s) {
    if (last_ && last_->stream == s) [[likely]]
      return *last_;
    return find_bins(s);
  }
  // The bins of `s` if the latest call was on `s` (nullptr otherwise): bins_for without a call.
  stream_bins* last_bins_for(stream_ref s) noexcept { return last_ && last_->stream == s ? last_ : nullptr; }
  // The newest block of bin `b` if it is `size` bytes at `alignment`, taken out; none otherwise,
  // with the bin untouched.
  [[gnu::always_inline]] std::uint32_t pop_top(stream_bins& sb, std::size_t b, std::size_t size,
                                                std::size_t alignment) noexcept {
    bin_item top;
    return take_top(sb, b, size, alignment - 1, top) ? top.rec : none;
  }
  // pop_top for the allocate's common path, at the default alignment, which every block meets (each
  // starts on a multiple of 256 B, slots and arena blocks alike), so the address is not looked at.
  // The block comes back whole: its address for the caller, straight from the bin.
  [[gnu::always_inline]] bool pop_top_default(stream_bins& sb, std::size_t b, std::size_t size,
                                              bin_item& out) noexcept {
    return take_top(sb, b, size, 0, out);
  }
  // Pops a cached block of `size` bytes for bin `b` (and `alignment`, if over 256); none if none.
  // Newest first: warm in cache, and in a small class every block fits.
  std::uint32_t pop(stream_bins& sb, std::size_t b, std::size_t size, std::size_t alignment) {
    const std::uint32_t i = pop_top(sb, b, size, alignment);
    if (i != none || !sb.bins[b].count) [[likely]]
      return i;
    return probe(sb, sb.bins[b], size, alignment);
  }
  // Takes the block at position `k` out of bin `x`; the blocks after it move down one.
  std::uint32_t take_at(stream_bins& sb, bin& x, std::uint32_t k) noexcept {
    const std::uint32_t i = x.items[k].rec;
    std::copy(x.items.get() + k + 1, x.items.get() + x.count, x.items.get() + k);
    --x.count;
    uncount(sb, recs[i]);
    return i;
  }
  // Growing first, when pop found no block of exactly `size` bytes for a large request of class `b`:
  // the smallest of the newest fit_scan arena blocks of bin `b` that holds `size` bytes (such a
  // block is at most 1/8 of a power of two larger), else the newest block of one of the next
  // fit_up_classes classes if it is an arena block; none if none fits. The others keep their order.
  // (Slots stay with the small requests they are carved for.)
  static constexpr std::uint32_t fit_scan = 8;
  static constexpr std::size_t fit_up_classes = 2;
  [[gnu::noinline]] std::uint32_t pop_fit(stream_bins& sb, std::size_t b, std::size_t size, std::size_t alignment) {
    auto fits = [&](std::uint32_t i) {
      return !recs[i].sl && recs[i].block_bytes >= size && (recs[i].addr & (alignment - 1)) == 0;
    };
    {
      bin& x = sb.bins[b];
      const std::uint32_t stop = x.count > fit_scan ? x.count - fit_scan : 0;
      std::uint32_t best = x.count;  // position in x.items
      for (std::uint32_t k = x.count; k-- > stop;) {
        const std::uint32_t i = x.items[k].rec;
        if (!fits(i) || (best < x.count && recs[i].block_bytes >= recs[x.items[best].rec].block_bytes)) continue;
        best = k;
        if (recs[i].block_bytes == size) break;
      }
      if (best < x.count) return take_at(sb, x, best);
    }
    for (std::size_t c = b + 1; c <= b + fit_up_classes && c < sb.bins.size(); ++c) {
      bin& x = sb.bins[c];
      if (x.count && fits(x.items[x.count - 1].rec)) return take_at(sb, x, x.count - 1);
    }
    return none;
  }
  // Caches block `i` (already rec_cached) in its bin, unless the bin is full or the byte budget of
  // its kind (slots or arena blocks) is spent; false: not cached (and `r` untouched). The budget is
  // checked before the block is added, so while it is not spent a block of any size is welcome: a
  // loop over one big tensor stays fast even when smaller blocks are cached beside it (each kind
  // exceeds its budget by one block at most).
  [[gnu::always_inline]] bool push(stream_bins& sb, block_rec& r, std::uint32_t i, std::size_t max_bytes) {
    if (sb.held[sb.budget_of(r)] >= max_bytes) return false;  // before bin_at: no bin set up for nothing
    return push_into(sb, sb.bin_at(r.bin), r, i, r.addr, max_bytes);
  }
  // push into `x`, the bin of `r` (set up); `addr` is r.addr as the caller has it (the common free
  // has it in hand, and the next allocate's answer then need not wait for the record's load).
  [[gnu::always_inline]] bool push_into(stream_bins& sb, bin& x, block_rec& r, std::uint32_t i, std::uintptr_t addr,
                                        std::size_t max_bytes) {
    std::size_t& held = sb.held[sb.budget_of(r)];
    if (held >= max_bytes) return false;
    if (x.count >= x.limit) return false;
    x.items[x.count++] = {addr, i};
    held += r.block_bytes;
    // Only arena blocks: they alone are evicted by age (make_room; slots go to their slabs), and
    // the hint is about them. (Storing it on every push would spare an often mispredicted branch,
    // but then a stream's slot frees would hide the arena blocks its thread keeps for another
    // stream from take_back_others.)
    if (!r.sl) {
      r.cached_at = fast_frees;
      arena_cached_bytes.store(sb.held[1], std::memory_order_relaxed);
    }
    return true;
  }

  // Takes the oldest cached arena block of `sb` out of its bin (the oldest of the bins' bottom
  // blocks: a bin keeps its newest last); none if none. Making room for a newer one: the blocks a
  // job frees now are the shapes it asks for next, while one cached long ago is a shape it has
  // moved on from (with batch shapes at random, blocks of past batches would fill the budget and
  // refuse nearly every large free). Looks only at the bins that hold an arena block of this front
  // cache (arena_bins_), and at the bottom of each: the free's common path keeps no order beyond
  // the stamp (an ordered list of cached blocks, pushed on every free, would cost every large
  // alloc+free pair more).
  std::uint32_t take_oldest_arena_block(stream_bins& sb) noexcept {
    bin* oldest = nullptr;
    for (std::size_t w = 0; w < arena_bins_.size(); ++w) {
      for (std::uint64_t bits = arena_bins_[w]; bits; bits &= bits - 1) {
        bin& x = sb.bins[w * 64 + static_cast<std::size_t>(std::countr_zero(bits))];
        if (!x.count || recs[x.items[0].rec].sl) continue;
        if (!oldest || recs[x.items[0].rec].cached_at < recs[oldest->items[0].rec].cached_at) oldest = &x;
      }
    }
    return oldest ? take_at(sb, *oldest, 0) : none;
  }
  // Block `r` leaves a bin of `sb`.
  static void uncount(stream_bins& sb, const block_rec& r) noexcept {
    sb.held[sb.budget_of(r)] -= r.block_bytes;
  }

 private:
  // Both pops: the newest block of bin `b` into `out` and out of the bin if it is `size` bytes with
  // no address bit of `low_bits` set (0, a constant once inlined, tests no address); else false.
  [[gnu::always_inline]] bool take_top(stream_bins& sb, std::size_t b, std::size_t size, std::uintptr_t low_bits,
                                       bin_item& out) noexcept {
    bin& x = sb.bins[b];
    // A bin not set up yet has a count of 0.
    if (!x.count) return false;
    out = x.items[x.count - 1];
    if (recs[out.rec].block_bytes != size || (out.addr & low_bits) != 0) return false;
    --x.count;
    uncount(sb, recs[out.rec]);
    return true;
  }
  // A few blocks below the top: a large class's blocks differ in size.
  [[gnu::noinline]] std::uint32_t probe(stream_bins& sb, bin& x, std::size_t size, std::size_t alignment) {
    const std::uint32_t stop = x.count > 4 ? x.count - 4 : 0;
    for (std::uint32_t k = x.count - 1; k > stop; --k) {
      const std::uint32_t i = x.items[k - 1].rec;
      if (recs[i].block_bytes == size && (recs[i].addr & (alignment - 1)) == 0) {
        x.items[k - 1] = x.items[--x.count];
        uncount(sb, recs[i]);
        return i;
      }
    }
    return none;
  }
  [[gnu::noinline]] stream_bins& find_bins(stream_ref s) {
    for (auto& sb : streams)
      if (sb.stream == s) return *(last_ = &sb);
    stream_bins& sb = streams.emplace_back();
    sb.stream = s;
    sb.grow_first = grow_first_;
    return *(last_ = &sb);  // a new element may have moved the others: renew last_
  }
  // Arena blocks this front cache holds (live or cached) by bin, and which bins hold any: a block
  // keeps its bin from the moment the pool hands it out until it leaves (adopt, forget).
  std::array<std::uint32_t, bin_count> arena_blocks_in_bin_{};
  std::array<std::uint64_t, (bin_count + 63) / 64> arena_bins_{};
  void note_arena_block(std::size_t b, int change) noexcept {
    arena_blocks_in_bin_[b] += static_cast<std::uint32_t>(change);
    const std::uint64_t bit = std::uint64_t{1} << (b % 64);
    if (arena_blocks_in_bin_[b])
      arena_bins_[b / 64] |= bit;
    else
      arena_bins_[b / 64] &= ~bit;
  }
  stream_bins* last_ = nullptr;  // the stream of the latest call, most likely the next one's
  bool grow_first_;              // the pool's grow_before_reclaim, for its streams' bins
};

}  // namespace gpumem::detail
