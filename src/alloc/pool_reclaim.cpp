// The pool's policy for a request no front cache serves, under the pool's lock: reuse what is
// cached without growing, give back what caches hold (cheapest first), move memory, and only then
// grow — or, with grow_before_reclaim, grow first and reclaim when growing fails. Ends in the
// out-of-memory report when nothing is left.
#include <fmt/format.h>

#include <algorithm>
#include <mutex>

#include "pool_impl.hpp"

namespace gpumem {

// Under m: gives back what caches hold that the arena could reuse, cheapest first, trying
// `attempt` without growing after each step — empty slabs (no front cache touched), then the
// caller's own front cache (its lock is nearly free for it), and only then every thread's (one
// heavy fence, and every other thread's cache emptied) — and finally letting it grow. With many
// threads the last step alone would run on nearly every miss, emptying every thread's cache,
// which then carve their slabs again through this lock. Returns the address, or 0.
template <class Attempt>
std::uintptr_t pool::impl::reclaim(detail::front_cache* own, Attempt&& attempt) {
  // Empty slabs back to the arena, then one more try without growing if that freed any.
  auto release_and_retry = [&]() -> std::uintptr_t { return slabs.release_empty() ? attempt(false) : 0; };
  promote_ready();
  if (const std::uintptr_t a = release_and_retry()) return a;
  if (own && fronts.size() > 1) {
    {
      detail::front_guard flock(own->lock, true);
      flush_front(*own);
    }
    if (const std::uintptr_t a = release_and_retry()) return a;
  }
  flush_fronts();
  promote_ready();
  slabs.release_empty();
  return attempt(true);
}

// Under m: blocks whose cross-stream frees the clock now sees done become reusable.
void pool::impl::promote_ready() {
  if (clock.poll()) {
    arena.promote();
    slabs.promote();
  }
}

// Under m, growing first, before the pool grows for a large request of `size` on stream `s`:
// other threads' front caches that hold at least `size` bytes of large blocks (as their
// arena_cached_bytes says) give back those they keep for `s`, and the request is tried again
// without growing. With several threads one thread's cache can sit on what another's requests
// need: PyTorch's backward pass runs on a thread of its own, which frees there the activations
// the next forward pass asks for on the main thread. Only caches that hold that much are touched
// (each costs a heavy fence, front_lock.hpp), so a thread that frees a little now and then keeps
// its cache: emptying every cache before any growth makes every thread refill through the lock.
template <class Attempt>
std::uintptr_t pool::impl::take_back_others(const detail::front_cache* own, std::size_t size, stream_ref s,
                                Attempt& attempt) {
  bool any = false;
  for (auto& f : fronts)
    if (f.get() != own && f->arena_cached_bytes.load(std::memory_order_relaxed) >= size)
      any |= give_back_large(*f, s);
  return any ? attempt(false) : 0;
}

// Under m: the smallest arena block of the lowest class where front cache `f` keeps one for
// stream `s` that holds `size` bytes goes back to the arena, as freed on `s`. False if none.
bool pool::impl::give_back_fitting(detail::front_cache& f, stream_ref s, std::size_t size) {
  detail::front_guard flock(f.lock, true);
  detail::stream_bins& sb = f.bins_for(s);
  for (std::size_t b = detail::bin_of(size); b < sb.bins.size(); ++b) {
    detail::bin& x = sb.bins[b];
    std::uint32_t best = x.count;  // position in x.items
    for (std::uint32_t k = 0; k < x.count; ++k) {
      const detail::block_rec& r = f.recs[x.items[k].rec];
      if (!r.sl && r.block_bytes >= size &&
          (best == x.count || r.block_bytes < f.recs[x.items[best].rec].block_bytes))
        best = k;
    }
    if (best == x.count) continue;
    const std::uint32_t i = f.take_at(sb, x, best);
    arena.deallocate(f.recs[i].addr, s);
    f.forget(i);
    return true;
  }
  return false;
}

// Under m, reclaim_own_first: a large block of `size` on memory already mapped — as it is, or
// after the caller's own front cache gave back a block to carve it from, or all its large
// blocks; 0 when that is not enough (the caller then remaps, empties others' caches, grows).
std::uintptr_t pool::impl::take_mapped_or_own(std::size_t size, std::size_t alignment, stream_ref s, detail::front_cache& own,
                                   std::string& why) {
  auto mapped = [&] { return arena.allocate(size, alignment, s, false, &why, false); };
  std::uintptr_t a = mapped();
  if (!a && give_back_fitting(own, s, size)) a = mapped();
  if (!a && give_back_large(own)) a = mapped();
  return a;
}

// Under m: every large (arena) block front cache `f` keeps (for stream `only`, if given) goes
// back to the arena, as freed on its bin's stream; slots stay. False if it kept none.
bool pool::impl::give_back_large(detail::front_cache& f, std::optional<stream_ref> only) {
  detail::front_guard flock(f.lock, true);
  bool any = false;
  const std::size_t first_large = detail::bin_of(small_max + 1);
  for (auto& sb : f.streams) {
    if (only && sb.stream != *only) continue;
    for (std::size_t b = first_large; b < sb.bins.size(); ++b) {
      detail::bin& x = sb.bins[b];
      std::uint32_t kept = 0;
      for (std::uint32_t k = 0; k < x.count; ++k) {
        const std::uint32_t i = x.items[k].rec;
        if (f.recs[i].sl) {  // a slot (a small class's size may reach this bin): it stays
          x.items[kept++] = x.items[k];
          continue;
        }
        detail::front_cache::uncount(sb, f.recs[i]);
        arena.deallocate(f.recs[i].addr, sb.stream);
        f.forget(i);
        any = true;
      }
      x.count = kept;
    }
  }
  std::size_t left = 0;  // what it keeps for other streams, if any
  for (const auto& sb : f.streams) left += sb.held[1];
  f.arena_cached_bytes.store(left, std::memory_order_relaxed);
  return any;
}

// A job that had settled without a step plan (pool_plan.cpp) moves memory again: recording
// starts over, with the caller's cached large blocks given back so that every one is seen.
void pool::impl::rearm_plan_if_moving(detail::front_cache& fc) {
  if (arena.maps() + arena.unmaps() == plan_moves_mark) return;
  give_back_large(fc);
  plan_settled = false;
  plan_direct = true;
  plan.restart();
}

// `own`: the caller's front cache, if it has one of its own.
std::uintptr_t pool::impl::take(std::size_t bytes, std::size_t alignment, stream_ref s, detail::slab*& sl, std::string& why,
                    detail::front_cache* own) {
  const bool small = bytes <= slabs.small_max() && alignment <= detail::class_unit;
  const std::size_t cls = small ? detail::size_class_of(bytes) : 0;
  const std::size_t size = align_up(bytes, detail::arena::unit);
  auto attempt = [&](bool may_grow) -> std::uintptr_t {
    if (small) return slabs.allocate(cls, s, may_grow, sl);
    sl = nullptr;
    return arena.allocate(size, alignment, s, may_grow, &why);
  };
  // First without growing: cached memory, spares, idle granules. Then give back what caches
  // hold — caching never makes the pool grow — and only then grow; or, with
  // grow_before_reclaim, grow at once and give back only when growing fails.
  std::uintptr_t a = 0;
  if (!grow_first && !small && own && opts.reclaim_own_first) a = take_mapped_or_own(size, alignment, s, *own, why);
  if (!a) a = attempt(false);
  if (!a && grow_first) {
    // Before new memory: a large enough block the caller's front cache keeps for this stream,
    // from which the arena carves the request (the rest stays free for any size).
    if (!small && own && give_back_fitting(*own, s, size)) a = attempt(false);
    if (!a && !small && fronts.size() > 1) a = take_back_others(own, size, s, attempt);
    if (!a) a = attempt(true);
  }
  // With several threads, a stream that needs a new slab takes it before any cache is emptied:
  // each stream's slabs settle at what its own requests need, and then no small request takes
  // the pool's lock. Emptying every thread's cache instead freed slabs that their streams carved
  // again at once, through this lock, and each such slab, freed on one stream and carved on
  // another, costs an event on a GPU. Large requests still reclaim first: they are the memory.
  // (Growing first, it has just been tried.)
  if (!a && small && fronts.size() > 1 && !grow_first) a = attempt(true);
  if (!a) a = reclaim(own, attempt);
  if (!a) {
    release_all_cached();  // last resort
    a = attempt(true);
  }
  return a;
}

// Under m: every stream's frees waited for, everything the slab cache and arena cache handed
// back to the upstream (front caches are the caller's to flush first).
void pool::impl::release_all_cached() {
  clock.cover_all();
  clock.wait_all();
  arena.promote();
  slabs.promote();
  slabs.release_empty();
  arena.release(0);
}

void pool::impl::throw_oom(std::size_t bytes, std::size_t alignment, stream_ref s, std::string why) {
  ++st.failed_allocations;
  // A failed attempt may have taken physical granules it then kept as spares: reserved can
  // grow on this path too, and the peak must see it (else stats() shows peak < current).
  note_reserved();
  oom_report r;
  r.requested_bytes = bytes;
  r.alignment = alignment;
  r.stream = s;
  r.reserved_bytes = arena.reserved_bytes();
  r.live_bytes = exact_live();
  r.cached_bytes = r.reserved_bytes > r.live_bytes ? r.reserved_bytes - r.live_bytes : 0;
  r.largest_free_block_bytes = arena.largest_free_block();
  r.limit_bytes = opts.max_reserved_bytes == SIZE_MAX ? 0 : opts.max_reserved_bytes;
  r.cached_per_stream = arena.owned_free_per_stream();
  r.fragmentation = r.live_bytes ? double(r.reserved_bytes) / double(r.live_bytes) : 0.0;
  r.upstream_said = std::move(why);
  std::size_t stream_held = 0;
  for (const auto& c : r.cached_per_stream) stream_held += c.bytes;
  if (r.limit_bytes && r.reserved_bytes + bytes > r.limit_bytes)
    r.advice = "the pool's own limit stops it: raise pool_options::max_reserved_bytes, or free memory";
  else if (stream_held >= bytes)
    r.advice = "memory freed on other streams is still waiting for their work: synchronize those streams, "
               "or free blocks on the stream that will reuse them";
  else if (r.cached_bytes >= bytes)
    r.advice = fmt::format("the pool caches {} B it could not shape into this request (fragmentation {:.3f}): "
                           "call trim(), lower release_threshold_bytes, or use the virtual-memory upstream "
                           "so free granules can be remapped",
                           r.cached_bytes, r.fragmentation);
  else
    r.advice = "live memory alone fills the device: free tensors, shrink the batch, or use a larger device";
  throw out_of_memory(std::move(r));
}

// Under m, the reserve ceiling for a request of `size` bytes by the owner of `fc`: live and peak
// live as this thread sees them without taking every front cache's lock — its own front cache's
// exact figures when it is the only one (written by this thread alone), else the shared figures
// threads publish in steps of publish_quantum.
std::size_t pool::impl::ceiling_for(const detail::front_cache& fc, std::size_t size) const {
  std::size_t live = 0, peak = shared_peak.load(std::memory_order_relaxed);
  if (front_count.load(std::memory_order_relaxed) <= 1) {
    live = fc.live_bytes;
    peak = std::max(peak, fc.peak_live);
  } else {
    const std::ptrdiff_t shared = shared_live.load(std::memory_order_relaxed);
    live = shared > 0 ? static_cast<std::size_t>(shared) : 0;
  }
  const double bytes = opts.reserve_ceiling * static_cast<double>(std::max(peak, live + size));
  return bytes >= 0x1p63 ? SIZE_MAX : static_cast<std::size_t>(bytes);
}

}  // namespace gpumem
