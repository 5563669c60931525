// How front caches trade blocks with the rest of the pool: a bin refilled from its stream's slabs,
// bins trimmed back to them, room made for a freed block by sending older ones to the arena, whole
// caches flushed, and blocks no caller holds given back to the slab cache or the arena.
#include <algorithm>
#include <mutex>

#include "pool_impl.hpp"

namespace gpumem {

// Under m: a block no caller holds goes back to the slab cache or the arena, freed on `s`.
void pool::impl::give_back(std::uintptr_t a, const detail::live_entry& e, stream_ref s) {
  std::vector<stream_ref> also;
  if (e.used_elsewhere) {
    if (auto u = used_on.find(a); u != used_on.end()) {
      also = std::move(u->second);
      used_on.erase(u);
    }
  }
  if (opts.zero_on_free && !also.empty()) {
    // The other streams may still read the block: the zeroing on `s` waits for them.
    for (stream_ref other : also) {
      const event_ref ev = ord.record(other);
      ord.stream_wait(s, ev);
      ord.release(ev);
    }
    zero(a, e, s);
  }
  if (e.sl)
    slabs.deallocate(e.sl, a, s, also);
  else if (plan.region() && plan.in_region(a))
    plan_give_back(a, s, also);
  else
    arena.deallocate(a, s, also);
}

// Under m: every front cache's bins go back, each block as freed on its bin's stream.
void pool::impl::flush_fronts() {
  detail::all_fronts_locked held(fronts);
  for (std::size_t i = 0; i < fronts.size(); ++i) {
    flush_front(*fronts[i]);
    held.release_first(i + 1);  // its owner may go on while the others are flushed
  }
}
// Under m and `f`'s lock: every cached block of `f` goes back, as freed on its bin's stream.

void pool::impl::flush_front(detail::front_cache& f) {
  std::vector<detail::block_rec> rest;  // blocks that are not slots of their stream's own slabs
  for (auto& sb : f.streams) {
    if (!sb.cached_bytes()) continue;
    {
      // The stream's own slots go back under one shard lock; the rest after it.
      std::unique_lock<detail::spin_lock> shard_lock;
      if (sb.shard) shard_lock = std::unique_lock(sb.shard->m);
      for (auto& x : sb.bins) {
        for (std::uint32_t k = 0; k < x.count; ++k) {
          const detail::block_rec& r = f.recs[x.items[k].rec];
          if (!(r.sl && sb.shard && detail::slab_cache::put_back(*sb.shard, r.sl, r.slot))) rest.push_back(r);
          f.forget(x.items[k].rec);
        }
        x.count = 0;
      }
    }
    for (const auto& r : rest) {
      if (r.sl)
        slabs.deallocate(r.sl, r.addr, sb.stream, {});
      else
        arena.deallocate(r.addr, sb.stream);
    }
    rest.clear();
    sb.held[0] = sb.held[1] = 0;
  }
  f.arena_cached_bytes.store(0, std::memory_order_relaxed);
}

// --- The front tier's exchanges with its stream's slabs (under the front cache's lock and one
// shard lock; never the pool's lock, so threads on different streams do not meet). -------------

// Moves up to `n` free slots of class `b` from the stream's slabs into bin `b` of front cache
// `fc`, within the bin's limit and the byte budget (plus `extra` blocks the caller takes straight
// out again); the lowest address ends on top. Under the owner's front lock; takes the stream's
// shard lock.
std::uint32_t pool::impl::fill_bin(detail::front_cache& fc, detail::stream_bins& sb, std::size_t b, std::size_t size,
                       std::uint32_t n, std::size_t extra) {
  detail::bin& x = sb.bin_at(b);
  const std::size_t budget = cache_budget(fc, sb, nullptr);
  const std::size_t held = sb.held[0];
  const std::size_t room = (held < budget ? (budget - held) / size : 0) + extra;
  n = static_cast<std::uint32_t>(std::min<std::size_t>({n, x.limit - x.count, room}));
  if (!n) return 0;
  struct got_slot {
    std::uintptr_t addr;
    detail::slab* sl;
    std::uint32_t slot;
  };
  got_slot got[32];  // bin limits are at most 32
  std::uint32_t k = 0;
  {
    std::lock_guard g(sb.shard->m);
    detail::slab_cache::take_free(*sb.shard, b, n, [&](std::uintptr_t a, detail::slab* sl, std::uint32_t slot) {
      got[k++] = {a, sl, slot};
    });
  }
  for (std::uint32_t j = k; j-- > 0;)
    x.items[x.count++] = {got[j].addr, fc.adopt({got[j].addr, size, got[j].sl, {0}, {}, got[j].slot,
                                                 static_cast<std::uint16_t>(b), 8, detail::rec_cached})};
  sb.held[0] += k * size;
  return k;
}

// pop found nothing in bin `b`: a small class refills from the stream's slabs; a large request
// growing first may take a somewhat larger cached block (front_cache::pop_fit). One call out of
// the common path for both, which keeps that path's code as small as it was with refill alone.
std::uint32_t pool::impl::front_miss(detail::front_cache& fc, detail::stream_bins& sb, std::size_t b,
                                           std::size_t size, std::size_t alignment, bool small) {
  if (small) return sb.shard ? refill(fc, sb, b, size) : detail::front_cache::none;
  return grow_first ? fc.pop_fit(sb, b, size, alignment) : detail::front_cache::none;
}

// A miss in bin `b` of a small class: a batch of the stream's free slots, one of them handed out.
std::uint32_t pool::impl::refill(detail::front_cache& fc, detail::stream_bins& sb, std::size_t b, std::size_t size) {
  detail::bin& x = sb.bin_at(b);
  if (!fill_bin(fc, sb, b, size, std::max<std::uint32_t>(1, x.limit / 2), 1)) return detail::front_cache::none;
  ++fc.refills;
  sb.held[0] -= size;
  return x.items[--x.count].rec;
}

// Gives the older blocks of bin `x` back to their slabs, down to `keep`; only slots of slabs the
// bin's stream owns go (as frees on that stream), anything else stays. Under the shard lock.
void pool::impl::trim_bin(detail::front_cache& fc, detail::stream_bins& sb, detail::bin& x, std::uint32_t keep) {
  std::uint32_t drop = x.count > keep ? x.count - keep : 0, out = 0;
  for (std::uint32_t k = 0; k < x.count; ++k) {
    const std::uint32_t i = x.items[k].rec;
    const detail::block_rec& r = fc.recs[i];
    if (drop && r.sl && detail::slab_cache::put_back(*sb.shard, r.sl, r.slot)) {
      --drop;
      detail::front_cache::uncount(sb, r);
      fc.forget(i);
      continue;
    }
    x.items[out++] = x.items[k];
  }
  x.count = out;
}

// Caches freed block `i` (rec_cached) that front_cache::push refused (its bin full or the budget
// spent): first hands a batch back to the stream's slabs, then, for an arena block, makes room
// by taking older arena blocks out into `ev` (make_room). False: not cached (the pool's lock
// takes it).
bool pool::impl::cache_freed(detail::front_cache& fc, detail::stream_bins& sb, std::uint32_t i,
                                   evicted_blocks& ev) {
  detail::block_rec& r = fc.recs[i];
  const std::size_t budget = full_budget(fc, &r);
  if (sb.shard) {
    trim_for(fc, sb, r, budget);
    if (fc.push(sb, r, i, budget)) return true;
  }
  return !r.sl && make_room(fc, sb, i, budget, ev);
}

// cache_freed's first step, for block `r`: under the stream's shard lock, a full bin hands its
// older slots back, and past the budget every bin hands back half its slots.
void pool::impl::trim_for(detail::front_cache& fc, detail::stream_bins& sb, const detail::block_rec& r, std::size_t budget) {
  detail::bin& x = sb.bin_at(r.bin);
  // Growing first, an arena block has nothing to trim (its budget sweeps no slots, below) where
  // its bin has room, or where its class is past the slots' (its bin holds no slot to hand
  // back): no shard lock taken and released, nor its bin walked, for nothing on each refused
  // large free.
  if (!r.sl && sb.grow_first && (x.count < x.limit || r.bin > detail::bin_of(small_max))) return;
  {
    std::lock_guard g(sb.shard->m);
    if (x.count >= x.limit) trim_bin(fc, sb, x, x.limit / 2);
    if (sb.held[sb.budget_of(r)] >= budget && (r.sl || !sb.grow_first)) {
      // Over budget: every bin gives back half its slots. Only slots of slabs the stream owns
      // can go this way; when other slots, or arena blocks, are what fills the budget, the next
      // frees skip the sweep for a while (each of them goes to the pool's lock anyway) instead
      // of sweeping in vain every time. By default an arena block over its own budget sweeps
      // the slots too, though that makes it no room: cached slots pin slabs the tight policy
      // wants emptied and given back, and a thread whose large blocks overflow its cache is
      // turning its memory over — slots handed back now are ready by the time the pool would
      // otherwise grow. Growing first, an arena block over its budget goes straight to make_room.
      if (sb.sweep_backoff) {
        --sb.sweep_backoff;
      } else {
        for (auto& y : sb.bins) trim_bin(fc, sb, y, y.count / 2);
        if (sb.held[sb.budget_of(r)] >= budget) sb.sweep_backoff = 64;
      }
    }
  }
}

// Arena block `i`, freed, found its bin full or the arena blocks' budget spent: the oldest block
// of its bin, or the oldest cached arena blocks of its stream, leave for the arena (into `ev`,
// given back once the front cache's lock is released: the pool's lock comes first in the lock
// order) until it fits. Without this the budget, once filled with shapes a job no longer asks
// for, refused every newer block, and a job whose shapes vary sent nearly all its large frees,
// and so nearly as many large requests, to the pool's lock. A block no smaller than
// `budget` (full_budget: what it would have with the others gone) takes nothing out: it is more
// memory than the cache may hold for it.
bool pool::impl::make_room(detail::front_cache& fc, detail::stream_bins& sb, std::uint32_t i, std::size_t budget,
               evicted_blocks& ev) {
  detail::block_rec& r = fc.recs[i];
  if (r.block_bytes >= budget) return false;
  auto evict = [&](std::uint32_t j) {
    const detail::block_rec& old = fc.recs[j];
    ev.add(old.addr, old.block_bytes);
    in_transit_bytes.fetch_add(old.block_bytes, std::memory_order_relaxed);
    fc.forget(j);
    ++fc.evictions;
  };
  detail::bin& x = sb.bin_at(r.bin);
  // Within the reserve headroom a full bin of arena blocks widens once before it gives one up:
  // a training step frees dozens of blocks of one shape, where the bin keeps a few. Wider bins
  // without the headroom raise the reserve instead, and wider still take it past the headroom,
  // where the budget falls back and the reserve stays.
  if (x.count >= x.limit && grow_first && !fc.recs[x.items[0].rec].sl && within_headroom(fc))
    x.widen(2 * detail::bin_limit_for(r.block_bytes, true));
  if (x.count >= x.limit) {
    if (fc.recs[x.items[0].rec].sl) return false;  // a class of slots: those go back to their slabs
    evict(fc.take_at(sb, x, 0));
  }
  while (sb.held[1] >= budget && !ev.full()) {
    const std::uint32_t j = fc.take_oldest_arena_block(sb);
    if (j == detail::front_cache::none) break;
    evict(j);
  }
  return fc.push(sb, r, i, budget);
}

}  // namespace gpumem
