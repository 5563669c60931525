// gpumem::pool's fast path. The common allocate and free serve a request from the calling
// thread's front cache under that cache's own lock; the general and slow paths behind them take
// the pool's lock and ask the slab cache (small) or the arena (large) through pool_reclaim.cpp.
// Everything that touches the thread-local front cache pointer lives here: CMakeLists.txt
// compiles this file a second time, with the general TLS model, for gpumem_dlopen.
#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <mutex>
#include <stdexcept>
#include <unordered_set>

#include "pool_impl.hpp"

namespace gpumem {

namespace detail {
namespace {
std::atomic<std::uint64_t> next_pool_id{1};
std::mutex live_pools_mutex;
std::unordered_set<std::uint64_t>& live_pools() {
  static std::unordered_set<std::uint64_t> ids;
  return ids;
}
}  // namespace

std::uint64_t new_pool_id() { return next_pool_id.fetch_add(1); }
void register_pool(std::uint64_t id) {
  std::lock_guard lock(live_pools_mutex);
  live_pools().insert(id);
}
void unregister_pool(std::uint64_t id) {
  std::lock_guard lock(live_pools_mutex);
  live_pools().erase(id);
}
}  // namespace detail

namespace {
using detail::live_pools;
using detail::live_pools_mutex;
using detail::absurd_bytes;

struct tls_front {
  std::uint64_t pool_id;
  detail::front_cache* fc;
  pool::impl* owner;
};
// A thread's front caches, one per pool it used. When the thread ends, each that belongs to a pool
// still alive is flushed and left for the pool's next new thread (threads come and go in pools of
// workers; their caches should not).
struct tls_registry {
  std::vector<tls_front> v;
  tls_registry() = default;
  tls_registry(const tls_registry&) = delete;
  tls_registry& operator=(const tls_registry&) = delete;
  ~tls_registry();
};
// tls_last is read by every allocate and free. Its TLS model is the build's choice (CMakeLists.txt):
// - GPUMEM_TLS_INITIAL_EXEC (the gpumem library, for executables and the libraries they load at
//   start): initial-exec, a load from the thread pointer. The general model's access is a call to
//   __tls_get_addr as the compiler sees it — the linker relaxes it in an executable, but only after
//   the registers were allocated around a call — so the common allocate and free would keep their
//   arguments in saved registers, with the pushes and pops that takes.
// - without it (gpumem_dlopen, built for the PyTorch plug-in): the general model. A library loaded
//   with dlopen must not take static TLS: initial-exec there can fail with "cannot allocate memory
//   in static TLS block".
#if defined(GPUMEM_TLS_INITIAL_EXEC)
[[gnu::tls_model("initial-exec")]]
#endif
thread_local tls_front tls_last{0, nullptr, nullptr};
thread_local tls_registry tls_fronts;

}  // namespace

detail::front_cache& pool::impl::my_front() {
  if (tls_last.pool_id == id) [[likely]]
    return *tls_last.fc;
  return find_front();
}

detail::front_cache& pool::impl::find_front() {
  if (!bins_enabled) return *fronts.front();
  for (const auto& t : tls_fronts.v)
    if (t.pool_id == id) {
      tls_last = t;
      return *t.fc;
    }
  detail::front_cache* fc;
  {
    std::lock_guard lock(m);
    if (!orphans.empty()) {
      // A front cache whose thread has ended: empty of cached blocks, perhaps holding live ones.
      fc = orphans.back();
      orphans.pop_back();
    } else {
      if (fronts.size() == 1) start_sharing();
      fronts.push_back(std::make_unique<detail::front_cache>(grow_first));
      fc = fronts.back().get();
      front_count.fetch_add(1, std::memory_order_relaxed);
    }
  }
  if (tls_fronts.v.size() >= 16) {  // forget pools that are gone
    std::lock_guard lock(live_pools_mutex);
    std::erase_if(tls_fronts.v, [](const tls_front& t) { return !live_pools().count(t.pool_id); });
  }
  tls_fronts.v.push_back({id, fc, this});
  tls_last = tls_fronts.v.back();
  return *fc;
}

// The thread that owned `fc` has ended: its cached blocks go back, and the next new thread takes
// it over. Called with live_pools_mutex held, so the pool cannot go away meanwhile.
void pool::impl::orphan(detail::front_cache* fc) {
  std::lock_guard lock(m);
  {
    std::lock_guard flock(fc->lock);
    flush_front(*fc);
  }
  orphans.push_back(fc);
}

// Under m, when a second front cache appears: the first one's exact figures become the shared
// starting point.
void pool::impl::start_sharing() {
  std::size_t live = 0;
  detail::all_fronts_locked held(fronts);
  share_planning();
  for (auto& f : fronts) {
    live += f->live_bytes;
    raise_peak(f->peak_live);
    f->unpublished = 0;
  }
  shared_live.store(static_cast<std::ptrdiff_t>(live), std::memory_order_relaxed);
}

// Under m: blocks make_room took out of a front cache go back to the arena, freed on stream `s`.
void pool::impl::give_back_evicted(const evicted_blocks& ev, stream_ref s) {
  for (std::uint32_t k = 0; k < ev.n; ++k) {
    in_transit_bytes.fetch_sub(ev.bytes[k], std::memory_order_relaxed);
    arena.deallocate(ev.addr[k], s);
  }
}

namespace {
tls_registry::~tls_registry() {
  for (const auto& t : v) {
    std::lock_guard lock(live_pools_mutex);
    if (live_pools().count(t.pool_id)) t.owner->orphan(t.fc);
  }
}
}  // namespace

namespace {

// A request's block size and bin: its size class's for a small one (a slot, `small`), else its
// size in the arena's units. (Out-parameters: a returned struct costs the common allocate a few
// instructions more.)
[[gnu::always_inline]] inline bool shape_of(std::size_t bytes, std::size_t alignment, std::size_t small_max,
                                            std::size_t& size, std::size_t& bin) {
  // One class computation for both kinds, and a select for the size, not a branch (see
  // size_class_for): a class's bytes are a multiple of arena::unit, so rounding a large request up
  // to the unit never takes it past its class — its bin is the class of the request itself.
  // (The select is written as a mask: GCC turns a ?: here into branches.)
  const detail::class_and_size c = detail::size_class_for(bytes);
  const bool small = (bytes <= small_max) & (alignment <= detail::class_unit);
  const std::size_t keep_class = std::size_t{0} - std::size_t{small};  // all ones when small
  size = (c.bytes & keep_class) | (align_up(bytes, detail::arena::unit) & ~keep_class);
  bin = c.index;
  return small;
}

constexpr auto default_alignment_log2 = static_cast<std::uint8_t>(std::countr_zero(default_alignment));

// A power of two of at most default_alignment: no bit below the top one, and none from
// default_alignment's bit up but its own. The common allocate and free take only these (every
// block is allocated at default_alignment or more), tested without a branch per condition.
[[gnu::always_inline]] inline bool within_default_alignment(std::size_t alignment) noexcept {
  return ((alignment & (alignment - 1)) | ((alignment - 1) >> default_alignment_log2)) == 0;
}

[[noreturn, gnu::cold, gnu::noinline]] void bad_request(std::size_t bytes, std::size_t alignment, std::size_t granule) {
  if (!is_power_of_two(alignment))
    throw std::invalid_argument(fmt::format("gpumem::pool::allocate: alignment {} is not a power of two", alignment));
  if (alignment > granule)
    throw std::invalid_argument(fmt::format("gpumem::pool::allocate: alignment {} is over the {} B granule, the most "
                                            "the pool honours",
                                            alignment, granule));
  throw std::invalid_argument(
      fmt::format("gpumem::pool::allocate: {} bytes is not a plausible request (over 2^47)", bytes));
}

// Fills `bad` for a free whose size or alignment does not match the allocation.
[[gnu::cold, gnu::noinline]] void describe_mismatch(misuse_report& bad, const detail::live_entry& e, std::size_t bytes,
                                                    std::size_t alignment) {
  bad.bytes_expected = e.bytes;
  if (e.bytes != bytes) {
    bad.kind = misuse_kind::size_mismatch;
    bad.detail = "gpumem::pool::deallocate: the size given is not the size allocated; the block is left live";
  } else {
    bad.kind = misuse_kind::alignment_mismatch;
    bad.detail = fmt::format("gpumem::pool::deallocate: alignment {} given, {} allocated; the block is left live",
                             alignment, e.alignment());
  }
}

}  // namespace

// The common path: the newest block of the request's class in the calling thread's front cache,
// on the stream of the thread's latest call, under the cache's own lock only. It calls nothing but
// in tail position — anything else (bad arguments, another pool or stream, an empty bin, a lock a
// foreign thread wants) starts over in allocate_general — so the compiler builds less of a frame
// for it (GCC still saves a few registers, for the arguments the tail calls pass on). The
// request's class is worked out without a branch (shape_of), since sizes come in an order no
// predictor learns. Only requests at the default alignment or less take it — what PyTorch's and
// CuPy's adaptors and most callers ask: the alignment is then a constant, which no block fails (a
// larger one goes to allocate_general, a few dozen instructions more).
void* pool::allocate(std::size_t bytes, std::size_t alignment, stream_ref s) {
  impl& p = *impl_;
  const tls_front& last = tls_last;  // one address computation for both reads
  if (bytes - 1 >= absurd_bytes || !within_default_alignment(alignment) || last.pool_id != p.id ||
      p.captures_underway.load(std::memory_order_relaxed)) [[unlikely]]
    return p.allocate_general(bytes, alignment, s);
  std::size_t size, b;
  shape_of(bytes, default_alignment, p.small_max, size, b);
  detail::front_cache& fc = *last.fc;
  if (fc.lock.owner_try_lock()) [[likely]] {
    if (detail::stream_bins* sb = fc.last_bins_for(s)) [[likely]] {
      detail::bin_item top;
      if (fc.pop_top_default(*sb, b, size, top)) [[likely]] {
        fc.hand_out(top.rec, bytes, s, default_alignment_log2);
        ++fc.hits;
        if (p.account_quietly(fc, static_cast<std::ptrdiff_t>(bytes))) [[unlikely]]
          return p.publish_and_unlock(fc, top.addr);
        fc.lock.owner_unlock_tried();
        return reinterpret_cast<void*>(top.addr);
      }
    }
    fc.lock.owner_unlock_tried();
  }
  // default_alignment, not `alignment`: the general path rounds any smaller one up to it, and a
  // value not kept to here is one register fewer to save and restore on every call.
  return p.allocate_general(bytes, default_alignment, s);
}

// Every allocation the common path above did not serve: the calling thread's front cache, under
// its own lock only — the bin of the request's class on the request's stream, or a batch from the
// stream's slabs (one shard lock). Everything else — large requests no bin holds, a stream whose
// slabs have no free slot, growth — goes through allocate_slow and the pool's lock.
void* pool::impl::allocate_general(std::size_t bytes, std::size_t alignment, stream_ref s) {
  impl& p = *this;
  // One test for every bad or special argument (alignment 0 or not a power of two or over the
  // granule, a size of 0 or over 2^47); which one it was is sorted out off the common path.
  if (bytes - 1 >= absurd_bytes || (alignment & (alignment - 1)) != 0 || alignment - 1 >= p.granule) [[unlikely]] {
    if (bytes == 0 && is_power_of_two(alignment) && alignment <= p.granule) return nullptr;
    bad_request(bytes, alignment, p.granule);
  }
  if (alignment < default_alignment) alignment = default_alignment;
  if (p.captures_underway.load(std::memory_order_relaxed)) [[unlikely]]
    if (void* g = p.graph_allocate(bytes, alignment, s)) return g;
  std::size_t size, b;
  const bool small = shape_of(bytes, alignment, p.small_max, size, b);
  const auto align_log2 = static_cast<std::uint8_t>(std::countr_zero(alignment));
  const bool tried = tls_last.pool_id == p.id;  // and so the pool has front caches (find_front)
  if (tried) [[likely]] {
    detail::front_cache& fc = *tls_last.fc;
    fc.lock.owner_lock();
    detail::stream_bins& sb = fc.bins_for(s);
    std::uint32_t i = fc.pop(sb, b, size, alignment);
    if (i == detail::front_cache::none) {
      if (!small && p.plan_direct) {
        // The step plan's place for it, if it has one (a plan's block is marked by its slot). With
        // several threads the plan is the pool lock's: allocate_slow asks it.
        if (const std::uintptr_t a = p.plan_shared ? 0 : p.plan.place(size, alignment, s))
          i = fc.adopt({a, size, nullptr, {0}, {}, 1, static_cast<std::uint16_t>(b), 8, detail::rec_cached});
      } else {
        i = p.front_miss(fc, sb, b, size, alignment, small);
      }
    }
    if (i != detail::front_cache::none) [[likely]] {
      // block_bytes == size: a cached arena block may serve a small request of its class's size.
      // (pop_fit's blocks may be larger: a large request growing first.)
      const detail::block_rec& r = fc.hand_out(i, bytes, s, align_log2);
      p.account(fc, static_cast<std::ptrdiff_t>(bytes));
      ++fc.hits;
      fc.lock.owner_unlock();
      return reinterpret_cast<void*>(r.addr);
    }
    fc.lock.owner_unlock();
  }
  return p.allocate_slow({bytes, size, s, nullptr, 0, static_cast<std::uint16_t>(b), align_log2, false}, alignment,
                         small, tried);
}

void* pool::impl::allocate_slow(const detail::live_entry& entry, std::size_t alignment, bool small, bool tried) {
  const std::size_t bytes = entry.bytes, size = entry.block_bytes, b = entry.bin;
  const stream_ref s = entry.stream;
  detail::front_cache& fc = my_front();
  auto hand_out = [&](std::uint32_t i) {
    const detail::block_rec& r = fc.hand_out(i, bytes, s, entry.align_log2);
    account(fc, static_cast<std::ptrdiff_t>(bytes));
    return reinterpret_cast<void*>(r.addr);
  };
  if (bins_enabled && !tried) {
    // The thread's first call, or its first since it used another pool: the common path has not
    // looked at its front cache.
    detail::front_guard flock(fc.lock, true);
    detail::stream_bins& sb = fc.bins_for(s);
    std::uint32_t i = fc.pop(sb, b, size, alignment);
    if (i == detail::front_cache::none) i = front_miss(fc, sb, b, size, alignment, small);
    if (i != detail::front_cache::none) {
      ++fc.hits;
      return hand_out(i);
    }
  }

  detail::slab* sl = nullptr;
  std::lock_guard lock(m);
  // Slabs the front caches' batches emptied go back to the arena first, where this request (or
  // the new slab it may need) can use them without the pool flushing every front cache. With
  // several threads (or grow_before_reclaim) they stay listed for their stream until a reclaim:
  // a class whose live count swings would otherwise give its slab back and carve it again.
  if (!opts.grow_before_reclaim && fronts.size() <= 1) slabs.release_emptied();
  std::string why;
  std::uintptr_t a = 0;
  const bool planning = plan_direct && !small;
  if (planning) {
    // The step plan: a drained region back, a laid-out plan's region taken where a step starts,
    // and this request placed by it if it can be.
    detail::front_guard flock(fc.lock, true);
    return_plan_region_if_drained();
    if ((plan.install_due() && install_plan(fc)) || plan_shared) a = plan.place(size, alignment, s);
    // A stretch followed once that has ended gives its region back before anything else is placed.
    if (!a) return_plan_region_if_drained();
    if (!a && take_stretch(fc, size, alignment, s)) a = plan.place(size, alignment, s);
  }
  const bool planned = a != 0;
  if (!planned) {
    if (opts.reserve_ceiling > 0) arena.set_reserve_ceiling(ceiling_for(fc, size));
    a = take(bytes, alignment, s, sl, why, bins_enabled ? &fc : nullptr);
    if (!a) throw_oom(bytes, alignment, s, std::move(why));
    ++st.allocations;
    note_reserved();
  }
  if (plan_settled && !small) rearm_plan_if_moving(fc);  // (give_back_large takes fc's lock)
  // Into the caller's table before the pool's lock goes, so no one sees the block in no one's hands.
  detail::front_guard flock(fc.lock, bins_enabled);
  if (planning && !planned) plan_saw_alloc(a, size, alignment, s);
  // (A planned block is marked by its slot, 1; an arena block's is otherwise 0.)
  const std::uint32_t i = fc.adopt({a, sl ? sl->slot_bytes : size, sl, {0}, {}, sl ? sl->slot_of(a) : std::uint32_t{planned},
                                    static_cast<std::uint16_t>(b), 8, detail::rec_cached});
  if (planned) ++fc.hits;
  void* out = hand_out(i);
  if (bins_enabled && sl) {
    // The stream's slabs had no free slot of this class, or this is the stream's first miss: from
    // now on its front cache refills from the stream's shard, starting with the rest of this
    // slot's batch.
    detail::stream_bins& sb = fc.bins_for(s);
    if (!sb.shard) sb.shard = &slabs.shard_for(s);
    detail::bin& x = sb.bin_at(b);
    if (x.limit > 2) fill_bin(fc, sb, b, size, x.limit / 2 - 1, 0);
  }
  return out;
}

// The common path: a live block of the calling thread's front cache, freed with the figures it
// was allocated with on the stream of the thread's latest call, into a bin (set up) with room and
// within the budget. As pool::allocate's, it calls nothing but in tail position; anything else
// starts over in deallocate_general.
void pool::deallocate(void* ptr, std::size_t bytes, std::size_t alignment, stream_ref s) noexcept {
  impl& p = *impl_;
  // A larger alignment is checked against the block's in deallocate_general. Past this test the
  // general path is told default_alignment, which it treats as it would `alignment` (no block is
  // aligned to less), so `alignment` need not be kept: one register fewer to save (see allocate).
  if (tls_last.pool_id != p.fast_free_id || !ptr || !within_default_alignment(alignment) ||
      p.captures_underway.load(std::memory_order_relaxed)) [[unlikely]]
    return p.deallocate_general(ptr, bytes, alignment, s);
  detail::front_cache& fc = *tls_last.fc;
  if (fc.lock.owner_try_lock()) [[likely]] {
    const auto a = reinterpret_cast<std::uintptr_t>(ptr);
    const detail::rec_ref* pi = fc.index.find(a);
    detail::stream_bins* sb = fc.last_bins_for(s);
    if (pi && sb) [[likely]] {
      const std::uint32_t i = pi->rec;
      detail::block_rec& r = fc.recs[i];
      detail::bin& x = sb->bins[pi->bin];  // the index's copy: no wait for the record
      if (r.state == detail::rec_live && r.bytes == bytes && x.limit && (r.sl || !p.plan_direct)) [[likely]] {
        r.state = detail::rec_cached;
        fc.live_bytes -= bytes;
        const bool publish_due = p.account_free_quietly(fc, bytes);
        // Below front_cache_bytes of its kind every block is welcome (cache_budget): only the
        // bin's room is asked here. Past it the budget, a computation in floating point, is
        // worked out in free_past_floor, out of line: inlined here, its values took two more
        // saved registers on every free.
        if (sb->held[sb->budget_of(r)] < p.opts.front_cache_bytes) [[likely]] {
          if (fc.push_into(*sb, x, r, i, a, p.opts.front_cache_bytes)) [[likely]]
            return p.cached_free_done(fc, publish_due);
          return p.free_refused(fc, *sb, i, s, publish_due);
        }
        return p.free_past_floor(fc, *sb, i, s, publish_due);
      }
    }
    fc.lock.owner_unlock_tried();
  }
  p.deallocate_general(ptr, bytes, default_alignment, s);
}

// The common free's end for a block whose kind holds front_cache_bytes or more in its stream's
// bins: the budget worked out (cache_budget), then into the bin, or refused.
void pool::impl::free_past_floor(detail::front_cache& fc, detail::stream_bins& sb, std::uint32_t i, stream_ref s,
                                 bool publish_due) noexcept {
  detail::block_rec& r = fc.recs[i];
  if (fc.push(sb, r, i, cache_budget(fc, sb, &r))) [[likely]]
    return cached_free_done(fc, publish_due);
  free_refused(fc, sb, i, s, publish_due);
}

// Every free the common path above did not take: its checks again, with the front cache's lock
// taken whatever it costs, a stream's bins looked up, a bin set up; then deallocate_slow.
void pool::impl::deallocate_general(void* ptr, std::size_t bytes, std::size_t alignment, stream_ref s) noexcept {
  if (!ptr) return;
  impl& p = *this;
  if (p.captures_underway.load(std::memory_order_relaxed)) [[unlikely]]
    if (p.graph_deallocate(ptr, bytes, alignment, s)) return;
  const auto a = reinterpret_cast<std::uintptr_t>(ptr);
  if (tls_last.pool_id == p.fast_free_id) [[likely]] {
    detail::front_cache& fc = *tls_last.fc;
    fc.lock.owner_lock();
    if (const detail::rec_ref* pi = fc.index.find(a)) [[likely]] {
      const std::uint32_t i = pi->rec;
      detail::block_rec& r = fc.recs[i];
      // Live (and no record_use), with the figures it was allocated with: back into a bin.
      if (r.state == detail::rec_live && r.bytes == bytes && (alignment & (alignment - 1)) == 0 &&
          alignment - 1 < r.alignment()) [[likely]] {
        if (!r.sl && p.plan_direct) return p.free_direct(fc, i, bytes, s);
        r.state = detail::rec_cached;
        fc.live_bytes -= bytes;
        p.account(fc, -static_cast<std::ptrdiff_t>(bytes));
        detail::stream_bins& sb = fc.bins_for(s);
        const std::size_t budget = p.cache_budget(fc, sb, &r);
        if (fc.push(sb, r, i, budget)) [[likely]] {
          ++fc.fast_frees;
          fc.lock.owner_unlock();
          return;
        }
        p.free_refused(fc, sb, i, s);
        return;
      }
    }
    fc.lock.owner_unlock();
  }
  p.deallocate_slow(ptr, bytes, alignment, s);
}

// The free's fast path found no room for block `i` (rec_cached) in its bin: cache_freed makes
// some, or the block goes back to the core. Releases the front cache's lock, held by the caller.
void pool::impl::free_refused(detail::front_cache& fc, detail::stream_bins& sb, std::uint32_t i, stream_ref s,
                              bool publish_due) noexcept {
  if (publish_due) publish(fc);
  const std::uintptr_t a = fc.recs[i].addr;
  evicted_blocks ev;
  const bool cached = cache_freed(fc, sb, i, ev);
  detail::live_entry e;
  if (cached) {
    ++fc.fast_frees;
  } else {
    // Not cached: on its way back to the core, counted so a check in between still adds up.
    detail::block_rec& r = fc.recs[i];
    r.state = detail::rec_live;
    e = r.entry();
    fc.forget(i);
    if (!e.sl) in_transit_bytes.fetch_add(e.block_bytes, std::memory_order_relaxed);
  }
  fc.lock.owner_unlock();
  if (cached && !ev.n) return;
  std::lock_guard lock(m);
  give_back_evicted(ev, s);
  if (!cached) {
    if (!e.sl) in_transit_bytes.fetch_sub(e.block_bytes, std::memory_order_relaxed);
    give_back(a, e, s);
    ++st.deallocations;
  }
  note_reserved();
}

void pool::impl::deallocate_slow(void* ptr, std::size_t bytes, std::size_t alignment, stream_ref s) noexcept {
  impl& p = *this;
  const auto a = reinterpret_cast<std::uintptr_t>(ptr);
  misuse_report bad{misuse_kind::unknown_pointer, ptr, bytes, 0, {}};

  // Checks the caller's figures against live block `r` of front cache `f`; false (with `bad`
  // filled) when they do not match: the block then stays live.
  auto matches = [&](const detail::block_rec& r) {
    if (r.bytes != bytes || (alignment & (alignment - 1)) != 0 || alignment - 1 >= r.alignment()) {
      describe_mismatch(bad, r.entry(), bytes, alignment);
      return false;
    }
    return true;
  };
  // Takes matching live block `r` out of front cache `f`'s figures (zeroing it if asked).
  auto take_out = [&](detail::front_cache& f, detail::block_rec& r) {
    const detail::live_entry e = r.entry();
    if (p.zero_on_free && !e.used_elsewhere) p.zero(a, e, s);
    f.live_bytes -= bytes;
    p.account(f, -static_cast<std::ptrdiff_t>(bytes));
    return e;
  };

  detail::front_cache& fc = p.my_front();
  detail::live_entry e;
  bool found = false, ok = false, cached = false;
  bool in_own_front = false;
  evicted_blocks ev;
  {
    detail::front_guard flock(fc.lock, p.bins_enabled);
    if (detail::block_rec* r = fc.find_live(a)) {
      found = true;
      in_own_front = true;
      ok = matches(*r);
      if (ok) {
        e = take_out(fc, *r);
        const auto i = static_cast<std::uint32_t>(r - fc.recs.data());
        if (p.bins_enabled && !e.used_elsewhere) {
          r->state = detail::rec_cached;
          detail::stream_bins& sb = fc.bins_for(s);
          const std::size_t budget = p.cache_budget(fc, sb, r);
          cached = fc.push(sb, *r, i, budget) || p.cache_freed(fc, sb, i, ev);
        }
      }
      if (cached) {
        ++fc.fast_frees;
      } else if (ok) {
        const auto i = static_cast<std::uint32_t>(r - fc.recs.data());
        fc.forget(i);
        // On its way back to the core: counted so a check in between still adds up.
        p.in_transit_bytes.fetch_add(e.sl ? 0 : e.block_bytes, std::memory_order_relaxed);
      }
    }
  }
  if (found && !ok) {
    report_misuse(bad);
    return;
  }
  if (cached) {
    if (ev.n) {
      std::lock_guard lock(p.m);
      p.give_back_evicted(ev, s);
      p.note_reserved();
    }
    return;
  }
  {
    std::lock_guard lock(p.m);
    if (!found && p.graph_free_locked(a, bytes, s, bad)) {
      if (bad.kind == misuse_kind::unknown_pointer) return;  // a graph pool's block, freed
    } else if (!found) {
      {
        // Allocated by another thread: find the front cache that holds it.
        detail::all_fronts_locked held(p.fronts);
        for (auto& f : p.fronts) {
          if (f.get() == &fc) continue;
          if (detail::block_rec* r = f->find_live(a)) {
            found = true;
            ok = matches(*r);
            if (ok) {
              e = take_out(*f, *r);
              f->forget(static_cast<std::uint32_t>(r - f->recs.data()));
            }
            break;
          }
        }
      }
      if (!found) bad = p.classify_unknown(a, bytes);
    }
    if (ok) {
      if (in_own_front) p.in_transit_bytes.fetch_sub(e.sl ? 0 : e.block_bytes, std::memory_order_relaxed);
      p.give_back_evicted(ev, s);  // what cache_freed took out before it gave up on this block
      p.give_back(a, e, s);
      ++p.st.deallocations;
      p.note_reserved();
      return;
    }
  }
  report_misuse(bad);  // outside the locks: a handler may look at the pool
}

}  // namespace gpumem
