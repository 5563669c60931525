// gpumem::pool: the front of the pool. The common path serves a request from the calling
// thread's front cache under that cache's own lock; the slow path takes the pool's lock and asks
// the slab cache (small) or the arena (large), flushing front caches before it grows.
#include "gpumem/pool.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <atomic>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <unordered_map>
#include <unordered_set>

#include "gpumem/pool_option_table.hpp"

#include "arena.hpp"
#include "front_cache.hpp"
#include "slab_cache.hpp"
#include "stream_clock.hpp"

namespace gpumem {

namespace {
// Past this a size is a bug, not a request: no device has 128 TiB.
constexpr std::size_t absurd_bytes = std::size_t{1} << 47;
static_assert(detail::size_class_of(absurd_bytes) < detail::bin_count, "every plausible request has a bin");
// With several threads, each front cache adds its live bytes to the shared figure in steps of
// this much, so threads do not fight over one counter; the peak is then exact to threads × this.
// A thread whose requests come and go at random (the threads pattern: 256 B - 1 MiB) crosses 1 MiB
// every ~16 operations — a contended read-modify-write every 16 — and 4 MiB every ~250.
constexpr std::ptrdiff_t publish_quantum = std::ptrdiff_t{4} << 20;

// Pools are told apart in thread-local storage by an id never reused, so a thread's entry for a
// destroyed pool can never match a new one at the same address.
std::atomic<std::uint64_t> next_pool_id{1};
std::mutex live_pools_mutex;
std::unordered_set<std::uint64_t>& live_pools() {
  static std::unordered_set<std::uint64_t> ids;
  return ids;
}
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
//   the registers were allocated around a call — so the common allocate and free kept their
//   arguments in saved registers: ~8 more instructions a pair, and the pushes and pops of the rest.
// - without it (gpumem_dlopen, built for the PyTorch plug-in): the general model. A library loaded
//   with dlopen must not take static TLS: initial-exec there failed on the H200 machine with
//   "cannot allocate memory in static TLS block".
#if defined(GPUMEM_TLS_INITIAL_EXEC)
[[gnu::tls_model("initial-exec")]]
#endif
thread_local tls_front tls_last{0, nullptr, nullptr};
thread_local tls_registry tls_fronts;

// Every front cache's lock, taken from outside (under the pool's lock) with one heavy fence.
class all_fronts_locked {
 public:
  explicit all_fronts_locked(const std::vector<std::unique_ptr<detail::front_cache>>& v) : v_(v) {
    detail::front_lock::lock_all(v_, [](const std::unique_ptr<detail::front_cache>& f) -> detail::front_lock& {
      return f->lock;
    });
  }
  // Gives the first `n` back early (their owners need not wait for the rest).
  void release_first(std::size_t n) {
    for (; released_ < n; ++released_) v_[released_]->lock.unlock();
  }
  ~all_fronts_locked() { release_first(v_.size()); }
  all_fronts_locked(const all_fronts_locked&) = delete;
  all_fronts_locked& operator=(const all_fronts_locked&) = delete;

 private:
  const std::vector<std::unique_ptr<detail::front_cache>>& v_;
  std::size_t released_ = 0;
};
// pool_options::max_handle_bytes, 0 resolved by the policy.
std::size_t handle_bytes_for(const pool_options& o) {
  if (o.max_handle_bytes) return o.max_handle_bytes;
  return o.grow_before_reclaim ? std::size_t{32} << 20 : 0;
}
// Whether slabs get their own half of the address range (arena_options::slab_zone): growing
// first, where the pool keeps its slabs for good. Carved by best fit, a slab lands in the
// smallest hole that holds it — between two large blocks of the step at hand — and stays there
// when they are freed, splitting the run they leave. The next pass's large blocks no longer fit
// where the first pass's did, and the pool grows: bert's second pass mapped 48 granules more
// than its first, its slabs strewn over the large blocks' range. Apart, as PyTorch keeps its
// small blocks in segments of their own, they split nothing: growing first, peak reserved / peak
// live on bert / llama / resnet went 1.488 / 1.451 / 1.076 -> 1.427 / 1.437 / 1.077 and bert's
// second pass mapped 18 granules more than its first (design notes, session 19). Not by default:
// the tight policy gives empty slabs back and moves idle granules, and there a half of its own
// moved resnet's memory more (session 18). Not with an initial reserve either: the reserve is
// mapped at the bottom of the range, and slabs placed above it would grow past it.
bool slab_zone_for(const pool_options& o) { return o.grow_before_reclaim && o.initial_reserve_bytes == 0; }

}  // namespace

struct pool::impl {
  // Read on every allocate and free, written never (front_count: once per new thread): one line
  // of their own, so the slow path's writes (the lock, counters) do not pull it from other cores.
  alignas(64) pool_options opts;
  upstream& up;
  ordering& ord;
  const std::size_t granule;  // the upstream's, asked once: checked on every allocate
  const std::size_t small_max;
  const std::uint64_t id;
  const bool bins_enabled;
  const bool zero_on_free;
  // `id` where a free may take the common path (front caches, no zeroing), else an id no pool
  // has: the free's fast path then tests one figure. Only a pool with front caches ever puts its
  // id in tls_last (find_front), so tls_last naming the pool already says it has them.
  const std::uint64_t fast_free_id;
  const bool grow_first;  // grow_before_reclaim: see cache_budget, pop_fit, give_back_fitting
  // Large blocks get a budget of their own past front_cache_bytes: growing first, or
  // front_cache_peak_fraction (see cache_budget).
  const bool large_budget;
  std::atomic<std::size_t> front_count{0};

  alignas(64) mutable std::mutex m;  // the slow path: clock, arena, slabs, the list of front caches
  detail::stream_clock clock;
  detail::arena arena;
  detail::slab_cache slabs;
  std::vector<std::unique_ptr<detail::front_cache>> fronts;
  std::vector<detail::front_cache*> orphans;  // fronts of ended threads, for the next new one
  std::unordered_map<std::uintptr_t, std::vector<stream_ref>> used_on;  // record_use, under m
  pool_stats st;                               // slow-path counters, under m
  alignas(64) std::atomic<std::ptrdiff_t> shared_live{0};  // published live bytes
  alignas(64) std::atomic<std::size_t> shared_peak{0};
  // Arena bytes a thread has taken out of its front cache and not yet given back under m.
  alignas(64) std::atomic<std::size_t> in_transit_bytes{0};
  // Reserved bytes as of the last note_reserved (under m), for within_headroom off the lock.
  std::atomic<std::size_t> reserved_published{0};

  impl(upstream& u, ordering& o, const pool_options& op)
      : opts(op),
        up(u),
        ord(o),
        granule(u.granularity()),
        small_max(std::min(op.small_max_bytes, std::size_t{1} << 20)),
        id(next_pool_id.fetch_add(1)),
        bins_enabled(op.front_cache),
        zero_on_free(op.zero_on_free),
        fast_free_id(op.front_cache && !op.zero_on_free ? id : ~std::uint64_t{0}),
        grow_first(op.grow_before_reclaim),
        large_budget(op.grow_before_reclaim || op.front_cache_peak_fraction > 0),
        clock(o),
        arena(u, clock,
              detail::arena_options{op.min_segment_bytes, op.max_reserved_bytes, op.address_range_bytes,
                                    op.release_threshold_bytes, op.idle_budget, op.grow_before_reclaim,
                                    handle_bytes_for(op), op.wait_before_grow, op.remap_time_budget,
                                    op.remap_cost_ns_per_granule, op.remap_clock_ns, op.stream_ordered_moves,
                                    slab_zone_for(op)}),
        slabs(arena, clock, small_max) {
    check_pool_option_ranges(op);
    if (op.zero_on_free && !u.can_zero())
      throw std::invalid_argument(fmt::format(
          "gpumem::pool: zero_on_free needs an upstream that can zero memory, and {} cannot", u.name()));
    if (op.initial_reserve_bytes > op.release_threshold_bytes)
      throw std::invalid_argument(fmt::format(
          "gpumem::pool: initial_reserve_bytes {} is over release_threshold_bytes {}: the pool would give the "
          "reserve back at the first free",
          op.initial_reserve_bytes, op.release_threshold_bytes));
    if (op.initial_reserve_bytes) {
      std::string why;
      if (!arena.reserve_upfront(op.initial_reserve_bytes, &why)) {
        oom_report r;
        r.requested_bytes = op.initial_reserve_bytes;
        r.reserved_bytes = arena.reserved_bytes();
        r.cached_bytes = r.reserved_bytes;
        r.limit_bytes = op.max_reserved_bytes == SIZE_MAX ? 0 : op.max_reserved_bytes;
        r.upstream_said = std::move(why);
        r.advice = "pool_options::initial_reserve_bytes is more than the upstream (or max_reserved_bytes) gives: "
                   "ask for less, or 0 to grow as requests come";
        throw out_of_memory(std::move(r));
      }
      note_reserved();
    }
    // Without per-thread caches every thread shares one front (and its table of live blocks).
    if (!bins_enabled) {
      fronts.push_back(std::make_unique<detail::front_cache>(grow_first));
      front_count = 1;
    }
    std::lock_guard lock(live_pools_mutex);
    live_pools().insert(id);
  }
  ~impl() {
    std::lock_guard lock(live_pools_mutex);
    live_pools().erase(id);
  }

  detail::front_cache& my_front() {
    if (tls_last.pool_id == id) [[likely]]
      return *tls_last.fc;
    return find_front();
  }
  [[gnu::noinline]] detail::front_cache& find_front() {
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
  void orphan(detail::front_cache* fc) {
    std::lock_guard lock(m);
    {
      std::lock_guard flock(fc->lock);
      flush_front(*fc);
    }
    orphans.push_back(fc);
  }

  // Accounts a front cache's change of live bytes (already applied to fc.live_bytes), under its
  // lock. With one front cache its own figures are the pool's: no shared write at all. With
  // several, each publishes to the shared figure in steps of publish_quantum.
  [[gnu::always_inline]] void account(detail::front_cache& fc, std::ptrdiff_t delta) {
    if (account_quietly(fc, delta)) [[unlikely]]
      publish(fc);
  }
  // account but for the publishing: true when publish(fc) is due (the caller then calls it, still
  // under the front cache's lock). The common paths call it so that they call nothing themselves.
  [[gnu::always_inline]] bool account_quietly(detail::front_cache& fc, std::ptrdiff_t delta) {
    if (fc.live_bytes > fc.peak_live) fc.peak_live = fc.live_bytes;
    return publish_due_after(fc, delta);
  }
  // The same for a free: live bytes fell, so the peak stands (no test for it on the free's path).
  [[gnu::always_inline]] bool account_free_quietly(detail::front_cache& fc, std::size_t bytes) {
    return publish_due_after(fc, -static_cast<std::ptrdiff_t>(bytes));
  }
  [[gnu::always_inline]] bool publish_due_after(detail::front_cache& fc, std::ptrdiff_t delta) {
    if (front_count.load(std::memory_order_relaxed) <= 1) [[likely]]
      return false;
    fc.unpublished += delta;
    return fc.unpublished >= publish_quantum || fc.unpublished <= -publish_quantum;
  }
  // The common paths' end when publishing is due: publishes, then releases the front cache's lock
  // (taken by front_lock::owner_try_lock).
  [[gnu::noinline]] void publish_and_unlock(detail::front_cache& fc) {
    publish(fc);
    fc.lock.owner_unlock_tried();
  }
  // The same for an allocation: returns `addr` (so the call is the common path's last step).
  [[gnu::noinline]] void* publish_and_unlock(detail::front_cache& fc, std::uintptr_t addr) {
    publish_and_unlock(fc);
    return reinterpret_cast<void*>(addr);
  }
  [[gnu::noinline]] void publish(detail::front_cache& fc) {
    const std::ptrdiff_t now = shared_live.fetch_add(fc.unpublished, std::memory_order_relaxed) + fc.unpublished;
    fc.unpublished = 0;
    raise_peak(now > 0 ? static_cast<std::size_t>(now) : 0);
  }
  void raise_peak(std::size_t v) {
    std::size_t peak = shared_peak.load(std::memory_order_relaxed);
    while (v > peak && !shared_peak.compare_exchange_weak(peak, v, std::memory_order_relaxed)) {
    }
  }
  // Under m, when a second front cache appears: the first one's exact figures become the shared
  // starting point.
  void start_sharing() {
    std::size_t live = 0;
    all_fronts_locked held(fronts);
    for (auto& f : fronts) {
      live += f->live_bytes;
      raise_peak(f->peak_live);
      f->unpublished = 0;
    }
    shared_live.store(static_cast<std::ptrdiff_t>(live), std::memory_order_relaxed);
  }

  void note_reserved() {
    st.reserved_bytes = arena.reserved_bytes();
    reserved_published.store(st.reserved_bytes, std::memory_order_relaxed);
    st.peak_reserved_bytes = std::max(st.peak_reserved_bytes, st.reserved_bytes);
  }

  // Under m: a block no caller holds goes back to the slab cache or the arena, freed on `s`.
  void give_back(std::uintptr_t a, const detail::live_entry& e, stream_ref s) {
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
    else
      arena.deallocate(a, s, also);
  }

  // Zero-on-free: the block is cleared on the freeing stream before anyone else can get it (the
  // events that let other streams reuse it are recorded after this).
  void zero(std::uintptr_t a, const detail::live_entry& e, stream_ref s) {
    up.zero(reinterpret_cast<void*>(a), e.block_bytes, s);
  }

  // Under m: every front cache's bins go back, each block as freed on its bin's stream.
  void flush_fronts() {
    all_fronts_locked held(fronts);
    for (std::size_t i = 0; i < fronts.size(); ++i) {
      flush_front(*fronts[i]);
      held.release_first(i + 1);  // its owner may go on while the others are flushed
    }
  }
  // Under m and `f`'s lock: every cached block of `f` goes back, as freed on its bin's stream.
  void flush_front(detail::front_cache& f) {
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

  // The most bytes of `r`'s kind stream `sb` of front cache `fc` may hold when block `r` comes in
  // (nullptr: slots from the stream's slabs, for fill_bin); front_cache::push checks it against
  // what stream_bins::held holds of that kind — slots and arena blocks are counted apart — before
  // the block is added. By default front_cache_bytes for each kind. Growing first, large blocks
  // are what the front cache must keep to spare the pool's lock (the arena's best fit costs about
  // a µs a request and a free), so arena blocks may fill front_cache_grow_fraction of the thread's
  // live bytes, this block included — past that share a block would add a whole block of memory
  // the pool holds — or front_cache_bytes if that is more; and slots front_cache_bytes plus the
  // share. With front_cache_peak_fraction (default policy) the share is of the thread's peak.
  // Below front_cache_bytes every block is welcome: the share is worked out only past it, off the
  // common path.
  [[gnu::always_inline]] std::size_t cache_budget(const detail::front_cache& fc, const detail::stream_bins& sb,
                                                 const detail::block_rec* r) const {
    if (large_budget && sb.held[r ? sb.budget_of(*r) : 0] >= opts.front_cache_bytes) [[unlikely]]
      return grown_budget(fc, r);
    return opts.front_cache_bytes;
  }
  // cache_budget for block `r` once its kind's held bytes have reached front_cache_bytes. Below
  // that cache_budget is front_cache_bytes, which is no more than this, so `held >= full_budget`
  // answers as `held >= cache_budget` does at any held bytes; and nothing it reads changes while a
  // refused free makes room (evictions change no live bytes, no peak, no reserve). So the refused
  // free works it out once for all its steps: each of them asking anew cost resnet's warm replay
  // 10 of its 381 instructions per operation (growing first).
  std::size_t full_budget(const detail::front_cache& fc, const detail::block_rec* r) const {
    return large_budget ? grown_budget(fc, r) : opts.front_cache_bytes;
  }
  // Byte counts are far below 2^63 (a request is at most 2^47 bytes), so they convert as signed
  // integers: one instruction, where an unsigned conversion branches on the top bit. Exact as far
  // as a double holds the count, the same as the unsigned conversion.
  static double as_double(std::size_t bytes) noexcept { return static_cast<double>(static_cast<std::int64_t>(bytes)); }
  // Inlined: a few instructions, worked out on every free past the floor (free_past_floor).
  [[gnu::always_inline]] std::size_t grown_budget(const detail::front_cache& fc, const detail::block_rec* r) const {
    const std::size_t fixed = opts.front_cache_bytes;
    // Growing first, a share of live now (what it keeps adds to reserved); by default, of the
    // thread's peak (what it keeps is flushed before the pool grows).
    auto share = static_cast<std::size_t>(grow_first ? as_double(fc.live_bytes) * opts.front_cache_grow_fraction
                                                     : as_double(fc.peak_live) * opts.front_cache_peak_fraction);
    if (!r || r->sl) return share > SIZE_MAX - fixed ? SIZE_MAX : fixed + share;
    if (grow_first && within_headroom(fc)) share = std::max(share, fc.peak_live - fc.live_bytes);
    return std::max(fixed, share > r->block_bytes ? share - r->block_bytes + 1 : 0);
  }

  // Growing first: reserved is within front_cache_reserve_headroom over the pool's peak live (the
  // larger of the published peak and this thread's own), so a front cache may keep large blocks
  // up to what its thread freed since its own peak (grown_budget). The budget follows the
  // thread's own peak, not the pool's: with two threads each keeping the pool's peak less its own
  // live, a live ResNet run's trace on its two recorded threads (autograd's backward thread frees
  // most) went 1.18 -> 1.32.
  [[gnu::always_inline]] bool within_headroom(const detail::front_cache& fc) const {
    if (fc.peak_live <= fc.live_bytes || opts.front_cache_reserve_headroom <= 0) return false;
    const std::size_t peak = std::max(fc.peak_live, shared_peak.load(std::memory_order_relaxed));
    const std::size_t reserved = reserved_published.load(std::memory_order_relaxed);
    // What initial_reserve_bytes holds is held anyway: caching within it adds nothing.
    return as_double(reserved) <= (1.0 + opts.front_cache_reserve_headroom) * as_double(peak) ||
           reserved <= opts.initial_reserve_bytes;
  }

  // --- The front tier's exchanges with its stream's slabs (under the front cache's lock and one
  // shard lock; never the pool's lock, so threads on different streams do not meet). -------------

  // Moves up to `n` free slots of class `b` from the stream's slabs into bin `b` of front cache
  // `fc`, within the bin's limit and the byte budget (plus `extra` blocks the caller takes straight
  // out again); the lowest address ends on top. Under the owner's front lock; takes the stream's
  // shard lock.
  std::uint32_t fill_bin(detail::front_cache& fc, detail::stream_bins& sb, std::size_t b, std::size_t size,
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
      x.items[x.count++] = {got[j].addr, fc.adopt({got[j].addr, size, got[j].sl, {0}, 0, got[j].slot,
                                                   static_cast<std::uint16_t>(b), 8, detail::rec_cached})};
    sb.held[0] += k * size;
    return k;
  }

  // pop found nothing in bin `b`: a small class refills from the stream's slabs; a large request
  // growing first may take a somewhat larger cached block (front_cache::pop_fit). One call out of
  // the common path for both, which keeps that path's code as small as it was with refill alone.
  [[gnu::noinline]] std::uint32_t front_miss(detail::front_cache& fc, detail::stream_bins& sb, std::size_t b,
                                             std::size_t size, std::size_t alignment, bool small) {
    if (small) return sb.shard ? refill(fc, sb, b, size) : detail::front_cache::none;
    return grow_first ? fc.pop_fit(sb, b, size, alignment) : detail::front_cache::none;
  }

  // A miss in bin `b` of a small class: a batch of the stream's free slots, one of them handed out.
  std::uint32_t refill(detail::front_cache& fc, detail::stream_bins& sb, std::size_t b, std::size_t size) {
    detail::bin& x = sb.bin_at(b);
    if (!fill_bin(fc, sb, b, size, std::max<std::uint32_t>(1, x.limit / 2), 1)) return detail::front_cache::none;
    ++fc.refills;
    sb.held[0] -= size;
    return x.items[--x.count].rec;
  }

  // Gives the older blocks of bin `x` back to their slabs, down to `keep`; only slots of slabs the
  // bin's stream owns go (as frees on that stream), anything else stays. Under the shard lock.
  static void trim_bin(detail::front_cache& fc, detail::stream_bins& sb, detail::bin& x, std::uint32_t keep) {
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

  // Arena blocks make_room took out of a front cache, on their way back to the arena.
  struct evicted_blocks {
    static constexpr std::uint32_t most = 8;  // past this many, the freed block is not cached either
    std::uintptr_t addr[most];
    std::size_t bytes[most];
    std::uint32_t n = 0;
    bool full() const noexcept { return n == most; }
    void add(std::uintptr_t a, std::size_t b) noexcept {
      addr[n] = a;
      bytes[n++] = b;
    }
  };

  // Caches freed block `i` (rec_cached) that front_cache::push refused (its bin full or the budget
  // spent): first hands a batch back to the stream's slabs, then, for an arena block, makes room
  // by taking older arena blocks out into `ev` (make_room). False: not cached (the pool's lock
  // takes it).
  [[gnu::noinline]] bool cache_freed(detail::front_cache& fc, detail::stream_bins& sb, std::uint32_t i,
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
  void trim_for(detail::front_cache& fc, detail::stream_bins& sb, const detail::block_rec& r, std::size_t budget) {
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
        // otherwise grow (the example varlen trace on a lagging device, 1.427x live without these
        // sweeps, 1.179x with them; waiting before growth 1.034x and 1.008x). Growing first, an
        // arena block over its budget goes straight to make_room.
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
  // for, refused every newer block: bert's trace (batch shapes at random) sent 97 % of its large
  // frees, and so nearly as many large requests, to the pool's lock. A block no smaller than
  // `budget` (full_budget: what it would have with the others gone) takes nothing out: it is more
  // memory than the cache may hold for it.
  bool make_room(detail::front_cache& fc, detail::stream_bins& sb, std::uint32_t i, std::size_t budget,
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
    // a training step frees dozens of blocks of one shape (resnet's trace: 72 of 24.5 MiB a step,
    // where the bin keeps 3). Wider bins without the headroom raised resnet's reserve instead
    // (1.0415 -> 1.054 at twice the limit), and three times the limit or more took it past the
    // headroom, where the budget falls back and the reserve stays (1.117).
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

  // Under m: blocks make_room took out of a front cache go back to the arena, freed on stream `s`.
  void give_back_evicted(const evicted_blocks& ev, stream_ref s) {
    for (std::uint32_t k = 0; k < ev.n; ++k) {
      in_transit_bytes.fetch_sub(ev.bytes[k], std::memory_order_relaxed);
      arena.deallocate(ev.addr[k], s);
    }
  }

  [[gnu::noinline]] void* allocate_general(std::size_t bytes, std::size_t alignment, stream_ref s);
  [[gnu::noinline]] void* allocate_slow(const detail::live_entry& entry, std::size_t alignment, bool small, bool tried);
  [[gnu::noinline]] void deallocate_general(void* ptr, std::size_t bytes, std::size_t alignment, stream_ref s) noexcept;
  [[gnu::noinline]] void deallocate_slow(void* ptr, std::size_t bytes, std::size_t alignment, stream_ref s) noexcept;
  // `publish_due`: what account_quietly said of this free (publish(fc) not yet called).
  [[gnu::noinline]] void free_refused(detail::front_cache& fc, detail::stream_bins& sb, std::uint32_t i, stream_ref s,
                                      bool publish_due = false) noexcept;
  // The common free's end once its block is in a bin (pool::deallocate, free_past_floor): counted,
  // published if due, the front cache's lock (taken by owner_try_lock) released.
  [[gnu::always_inline]] void cached_free_done(detail::front_cache& fc, bool publish_due) {
    ++fc.fast_frees;
    if (publish_due) [[unlikely]]
      return publish_and_unlock(fc);
    fc.lock.owner_unlock_tried();
  }
  // The common free's end once the block's kind holds front_cache_bytes in `sb` (pool::deallocate).
  [[gnu::noinline]] void free_past_floor(detail::front_cache& fc, detail::stream_bins& sb, std::uint32_t i,
                                         stream_ref s, bool publish_due) noexcept;

  // Under m: gives back what caches hold that the arena could reuse, cheapest first, trying
  // `attempt` without growing after each step — empty slabs (no front cache touched), then the
  // caller's own front cache (its lock is nearly free for it), and only then every thread's (one
  // heavy fence, and every other thread's cache emptied) — and finally letting it grow. With many
  // threads the last step was taken on nearly every miss, emptying 16 threads' caches, which then
  // carved their slabs again through this lock; the first two steps spare about a third of those
  // (design notes, "Many threads"). Returns the address, or 0.
  template <class Attempt>
  std::uintptr_t reclaim(detail::front_cache* own, Attempt&& attempt) {
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
  void promote_ready() {
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
  // the next forward pass asks for on the main thread. Replayed on its two recorded threads, a
  // live ResNet run's trace reserved 1.193x peak live growing first, 1.081 with this (the live run
  // on the H200: 1.081 of peak allocated). Only caches that hold that much are touched (each costs
  // a heavy fence, front_lock.hpp), so a thread that frees a little now and then keeps its cache;
  // an earlier cure that emptied every cache before any growth slowed a live BERT's steps from 47
  // to 80 ms.
  template <class Attempt>
  std::uintptr_t take_back_others(const detail::front_cache* own, std::size_t size, stream_ref s,
                                  Attempt& attempt) {
    bool any = false;
    for (auto& f : fronts)
      if (f.get() != own && f->arena_cached_bytes.load(std::memory_order_relaxed) >= size)
        any |= give_back_large(*f, s);
    return any ? attempt(false) : 0;
  }

  // Under m: the smallest arena block of the lowest class where front cache `f` keeps one for
  // stream `s` that holds `size` bytes goes back to the arena, as freed on `s`. False if none.
  bool give_back_fitting(detail::front_cache& f, stream_ref s, std::size_t size) {
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
  std::uintptr_t take_mapped_or_own(std::size_t size, std::size_t alignment, stream_ref s, detail::front_cache& own,
                                     std::string& why) {
    auto mapped = [&] { return arena.allocate(size, alignment, s, false, &why, false); };
    std::uintptr_t a = mapped();
    if (!a && give_back_fitting(own, s, size)) a = mapped();
    if (!a && give_back_large(own)) a = mapped();
    return a;
  }
  // Under m: every large (arena) block front cache `f` keeps (for stream `only`, if given) goes
  // back to the arena, as freed on its bin's stream; slots stay. False if it kept none.
  bool give_back_large(detail::front_cache& f, std::optional<stream_ref> only = std::nullopt) {
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

  // `own`: the caller's front cache, if it has one of its own.
  std::uintptr_t take(std::size_t bytes, std::size_t alignment, stream_ref s, detail::slab*& sl, std::string& why,
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
    if (!a) a = reclaim(own, attempt);
    if (!a) {
      release_all_cached();  // last resort
      a = attempt(true);
    }
    return a;
  }

  // Under m: every stream's frees waited for, everything the slab cache and arena cache handed
  // back to the upstream (front caches are the caller's to flush first).
  void release_all_cached() {
    clock.cover_all();
    clock.wait_all();
    arena.promote();
    slabs.promote();
    slabs.release_empty();
    arena.release(0);
  }

  [[noreturn]] void throw_oom(std::size_t bytes, std::size_t alignment, stream_ref s, std::string why) {
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
  std::size_t ceiling_for(const detail::front_cache& fc, std::size_t size) const {
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

  // Under m: the sum of every front cache's live bytes.
  std::size_t exact_live() const {
    all_fronts_locked held(fronts);
    return sum_live();
  }
  // The same with every front cache's lock already held.
  std::size_t sum_live() const {
    std::size_t live = 0;
    for (const auto& f : fronts) live += f->live_bytes;
    return live;
  }

  // Under m: the misuse a pointer no front cache holds live stands for.
  misuse_report classify_unknown(std::uintptr_t a, std::size_t bytes) const {
    misuse_report r{misuse_kind::unknown_pointer, reinterpret_cast<void*>(a), bytes, 0, {}};
    bool cached = false;
    {
      all_fronts_locked held(fronts);
      for (const auto& f : fronts)
        if (const detail::rec_ref* i = f->index.find(a)) cached |= f->recs[i->rec].state == detail::rec_cached;
    }
    if (cached || arena.is_free_block_start(a) || slabs.is_free_slot(a)) {
      r.kind = misuse_kind::double_free;
      r.detail = "gpumem::pool::deallocate: this pointer was already freed";
    } else {
      r.detail = "gpumem::pool::deallocate: not a live allocation of this pool (an interior pointer, or a pointer "
                 "of another resource)";
    }
    return r;
  }
};

namespace {
tls_registry::~tls_registry() {
  for (const auto& t : v) {
    std::lock_guard lock(live_pools_mutex);
    if (live_pools().count(t.pool_id)) t.owner->orphan(t.fc);
  }
}
}  // namespace

pool::pool(upstream& up, ordering& ord, pool_options opts) : impl_(std::make_unique<impl>(up, ord, opts)) {}
pool::~pool() = default;

namespace {

// A request's block size and bin: its size class's for a small one (a slot, `small`), else its
// size in the arena's units. (Out-parameters: returned as a struct, the common allocate ran five
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
// for it (GCC still saves five registers, for the arguments the tail calls pass on): a warm
// alloc+free pair on the simulated device ran 241-247 instructions with the general path's steps
// inline here, 227-233 without (bench/RESULTS.md, session 16). The request's class is worked out
// without a branch (shape_of), since sizes come in an order no predictor learns (callgrind's
// branch model put 0.18 of bert's ~2.1 mispredictions per operation there, session 22). Only
// requests at the default alignment or less take it — what PyTorch's and CuPy's adaptors and most
// callers ask: the alignment is then a constant, which no block fails (a larger one goes to
// allocate_general, a few dozen instructions more), and the pair it spares ~10 instructions.
void* pool::allocate(std::size_t bytes, std::size_t alignment, stream_ref s) {
  impl& p = *impl_;
  const tls_front& last = tls_last;  // one address computation for both reads
  if (bytes - 1 >= absurd_bytes || !within_default_alignment(alignment) || last.pool_id != p.id) [[unlikely]]
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
  std::size_t size, b;
  const bool small = shape_of(bytes, alignment, p.small_max, size, b);
  const auto align_log2 = static_cast<std::uint8_t>(std::countr_zero(alignment));
  const bool tried = tls_last.pool_id == p.id;  // and so the pool has front caches (find_front)
  if (tried) [[likely]] {
    detail::front_cache& fc = *tls_last.fc;
    fc.lock.owner_lock();
    detail::stream_bins& sb = fc.bins_for(s);
    std::uint32_t i = fc.pop(sb, b, size, alignment);
    if (i == detail::front_cache::none) i = p.front_miss(fc, sb, b, size, alignment, small);
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
  // the new slab it may need) can use them without the pool flushing every front cache.
  // (With grow_before_reclaim they stay: the pool keeps what it has and grows when it must.)
  if (!opts.grow_before_reclaim) slabs.release_emptied();
  std::string why;
  if (opts.reserve_ceiling > 0) arena.set_reserve_ceiling(ceiling_for(fc, size));
  const std::uintptr_t a = take(bytes, alignment, s, sl, why, bins_enabled ? &fc : nullptr);
  if (!a) throw_oom(bytes, alignment, s, std::move(why));
  ++st.allocations;
  note_reserved();
  // Into the caller's table before the pool's lock goes, so no one sees the block in no one's hands.
  detail::front_guard flock(fc.lock, bins_enabled);
  const std::uint32_t i = fc.adopt({a, sl ? sl->slot_bytes : size, sl, {0}, 0, sl ? sl->slot_of(a) : 0,
                                    static_cast<std::uint16_t>(b), 8, detail::rec_cached});
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
  if (tls_last.pool_id != p.fast_free_id || !ptr || !within_default_alignment(alignment)) [[unlikely]]
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
      if (r.state == detail::rec_live && r.bytes == bytes && x.limit) [[likely]] {
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
    if (!found) {
      {
        // Allocated by another thread: find the front cache that holds it.
        all_fronts_locked held(p.fronts);
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

void pool::record_use(void* ptr, stream_ref s) {
  impl& p = *impl_;
  const auto a = reinterpret_cast<std::uintptr_t>(ptr);
  std::lock_guard lock(p.m);
  all_fronts_locked held(p.fronts);
  for (auto& f : p.fronts) {
    if (detail::block_rec* r = f->find_live(a)) {
      if (s == r->stream) return;
      r->state |= detail::rec_used_elsewhere;
      auto& v = p.used_on[a];
      if (std::find(v.begin(), v.end(), s) == v.end()) v.push_back(s);
      return;
    }
  }
  throw std::invalid_argument(fmt::format("gpumem::pool::record_use: {} is not a live allocation of this pool", ptr));
}

void pool::release_stream(stream_ref s) {
  impl& p = *impl_;
  std::lock_guard lock(p.m);
  p.flush_fronts();        // blocks cached for `s` go back as freed on `s`...
  p.clock.forget(s);       // ...then one wait covers every free on `s`
  p.arena.promote();       // what `s` owned is ready for every stream
  p.slabs.disown(s);
  p.slabs.promote();
  for (auto& [a, streams] : p.used_on) std::erase(streams, s);
}

void pool::trim() {
  impl& p = *impl_;
  std::lock_guard lock(p.m);
  p.flush_fronts();
  p.release_all_cached();
  p.note_reserved();
}

void pool::settle() {
  impl& p = *impl_;
  std::lock_guard lock(p.m);
  p.flush_fronts();
  // Frees whose streams have run by now turn ready (an event recorded, none waited for), so the
  // slabs they emptied can go too.
  p.clock.cover_all();
  p.promote_ready();
  p.slabs.release_empty();
  p.note_reserved();
}

pool_stats pool::stats() const {
  impl& p = *impl_;
  std::lock_guard lock(p.m);
  pool_stats s = p.st;
  all_fronts_locked held(p.fronts);
  s.live_bytes = p.sum_live();
  s.peak_live_bytes = std::max(p.shared_peak.load(std::memory_order_relaxed), s.live_bytes);
  std::uint64_t hits = 0, fast_frees = 0, refills = 0, evictions = 0;
  for (const auto& f : p.fronts) {
    if (p.fronts.size() == 1) s.peak_live_bytes = std::max(s.peak_live_bytes, f->peak_live);
    hits += f->hits;
    refills += f->refills;
    evictions += f->evictions;
    fast_frees += f->fast_frees;
  }
  s.reserved_bytes = p.arena.reserved_bytes();
  s.cached_bytes = s.reserved_bytes > s.live_bytes ? s.reserved_bytes - s.live_bytes : 0;
  s.largest_free_block_bytes = p.arena.largest_free_block();
  s.front_hits = hits;
  s.front_refills = refills;
  s.front_evictions = evictions;
  s.allocations += s.front_hits;
  s.deallocations += fast_frees;
  s.upstream_calls = p.arena.upstream_calls();
  s.upstream_releases = p.arena.upstream_releases();
  s.maps = p.arena.maps();
  s.unmaps = p.arena.unmaps();
  s.remap_ns = p.arena.remap_ns();
  s.remaps_deferred = p.arena.remaps_deferred();
  s.stream_ordered_moves = p.arena.stream_ordered_moves();
  s.driver_maps = p.arena.driver_maps();
  s.driver_unmaps = p.arena.driver_unmaps();
  s.kept_mappings = p.arena.kept_mappings();
  s.map_calls = p.arena.map_calls();
  s.unmap_calls = p.arena.unmap_calls();
  s.events_recorded = p.clock.events_recorded();
  return s;
}

void pool::reset_peaks() {
  impl& p = *impl_;
  std::lock_guard lock(p.m);
  all_fronts_locked held(p.fronts);
  const std::size_t live = p.sum_live();
  p.shared_peak.store(live, std::memory_order_relaxed);
  for (auto& f : p.fronts) f->peak_live = f->live_bytes;
  p.st.peak_live_bytes = live;
  p.st.peak_reserved_bytes = p.arena.reserved_bytes();
}

const pool_options& pool::options() const noexcept { return impl_->opts; }

void pool::check_invariants() const {
  impl& p = *impl_;
  std::lock_guard lock(p.m);
  p.arena.check();
  p.slabs.check();
  auto fail = [](const std::string& what) { throw std::logic_error("pool invariant broken: " + what); };
  // Every arena byte the pool holds live is a caller's block, a cached block or a slab. The front
  // caches are held all at once: one at a time, a block freed between two visits would be counted
  // both live (first visit) and in transit (at the end).
  all_fronts_locked held(p.fronts);
  std::size_t arena_held = p.slabs.slab_total_bytes();
  std::unordered_set<std::uintptr_t> seen;
  std::unordered_map<const detail::slab*, std::uint32_t> slot_refs;  // slots held live or cached
  auto check_slot = [&](std::uintptr_t a, const detail::slab* sl, std::uint32_t slot, std::size_t bytes) {
    if (a < sl->base || a + bytes > sl->base + sl->bytes) fail(fmt::format("slot {:#x} lies outside its slab", a));
    if (slot >= sl->slots || sl->base + slot * sl->slot_bytes != a) fail(fmt::format("slot {:#x} has the wrong index {}", a, slot));
    ++slot_refs[sl];
  };
  for (const auto& f : p.fronts) {
    std::size_t live = 0, cached_recs = 0;
    if (f->index.size() + f->spare_recs.size() != f->recs.size()) fail("a front cache's records do not add up");
    f->index.for_each([&](std::uintptr_t a, const detail::rec_ref& ref) {
      if (ref.rec >= f->recs.size()) fail(fmt::format("{:#x} indexes no record", a));
      const detail::block_rec& r = f->recs[ref.rec];
      if (r.addr != a) fail(fmt::format("{:#x} indexes the record of {:#x}", a, r.addr));
      if (ref.bin != r.bin) fail(fmt::format("{:#x} is indexed with bin {}, its record's is {}", a, ref.bin, r.bin));
      if (!seen.insert(a).second) fail(fmt::format("{:#x} is held twice", a));
      if (r.bin != detail::bin_of(r.block_bytes)) fail(fmt::format("block {:#x} has the wrong bin", a));
      if (r.sl) {
        check_slot(a, r.sl, r.slot, r.block_bytes);
        if (r.block_bytes != r.sl->slot_bytes) fail(fmt::format("slot {:#x} has the wrong size", a));
      } else {
        if (p.arena.live_size(a) != r.block_bytes) fail(fmt::format("block {:#x} is not live in the arena", a));
        arena_held += r.block_bytes;
      }
      if (r.live()) {
        live += r.bytes;
        if (a % r.alignment()) fail(fmt::format("live block {:#x} breaks its alignment {}", a, r.alignment()));
        if (r.bytes > r.block_bytes) fail(fmt::format("live block {:#x} is smaller than its request", a));
      } else if (r.state == detail::rec_cached) {
        ++cached_recs;
      } else {
        fail(fmt::format("{:#x} indexes an unused record", a));
      }
    });
    if (live != f->live_bytes) fail(fmt::format("front cache live bytes {} != counted {}", f->live_bytes, live));
    std::unordered_set<std::uint32_t> in_bins;
    for (const auto& sb : f->streams) {
      std::size_t held[2] = {0, 0};
      for (std::size_t b = 0; b < sb.bins.size(); ++b) {
        const detail::bin& x = sb.bins[b];
        if (x.count > x.limit) fail("a bin holds more than its limit");
        for (std::uint32_t k = 0; k < x.count; ++k) {
          const std::uint32_t i = x.items[k].rec;
          if (i >= f->recs.size() || f->recs[i].state != detail::rec_cached)
            fail("a bin holds a block that is not cached");
          if (x.items[k].addr != f->recs[i].addr)
            fail(fmt::format("a bin holds {:#x} for block {:#x}", x.items[k].addr, f->recs[i].addr));
          if (!in_bins.insert(i).second) fail(fmt::format("{:#x} is cached twice", f->recs[i].addr));
          if (f->recs[i].bin != b) fail(fmt::format("cached block {:#x} is in the wrong bin", f->recs[i].addr));
          held[sb.budget_of(f->recs[i])] += f->recs[i].block_bytes;
        }
      }
      if (held[0] != sb.held[0] || held[1] != sb.held[1]) fail("a stream's cached bytes are off");
    }
    if (in_bins.size() != cached_recs) fail("a cached block is in no bin");
  }
  // A slot out of its slab is a caller's, a front cache's, or on its way back under m.
  for (const auto& [sl, refs] : slot_refs) {
    std::lock_guard shard_lock(sl->shard.load(std::memory_order_relaxed)->m);
    if (refs > sl->live) fail(fmt::format("slab {:#x}: {} slots held but {} counted live", sl->base, refs, sl->live));
  }
  arena_held += p.in_transit_bytes.load(std::memory_order_relaxed);
  if (arena_held != p.arena.allocated_bytes())
    fail(fmt::format("the arena holds {} B live but blocks, cached blocks and slabs add to {} B",
                     p.arena.allocated_bytes(), arena_held));
}

std::vector<block_info> pool::blocks() const {
  impl& p = *impl_;
  std::lock_guard lock(p.m);
  std::unordered_set<std::uintptr_t> cached;
  all_fronts_locked held(p.fronts);
  for (const auto& f : p.fronts) {
    f->index.for_each([&](std::uintptr_t a, const detail::rec_ref& ref) {
      if (f->recs[ref.rec].state == detail::rec_cached && !f->recs[ref.rec].sl) cached.insert(a);
    });
  }
  std::vector<block_info> out;
  p.arena.append_blocks(out);
  for (auto& b : out)
    if (b.st == block_info::state::live && cached.count(b.address)) b.st = block_info::state::cached;
  return out;
}

}  // namespace gpumem
