#pragma once
// pool::impl, shared by the pool's translation units:
//   pool.cpp            the fast path: allocate and free through the calling thread's front cache,
//                       the thread-local lookup of that cache, and the slow paths behind them.
//   pool_front.cpp      how front caches trade blocks with slabs and the arena: refills, trims,
//                       room made for a freed block, caches flushed, blocks given back.
//   pool_reclaim.cpp    the policy for a request nothing cached serves: reuse, reclaim caches,
//                       move memory or grow, and the out-of-memory report.
//   pool_admin.cpp      construction and the calls that maintain the pool (record_use,
//                       release_stream, trim, settle).
//   pool_inspect.cpp    what the pool says of itself: stats, blocks, invariants, misuse reports.
// The small always-inline pieces the fast path uses (accounting, cache budgets) live here. A
// member declared inline here is defined in the one file that uses it, so the compiler weighs
// inlining it as it would a member defined in the class.
#include <algorithm>
#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "gpumem/detail/pool_tuning.hpp"

#include "arena.hpp"
#include "front_cache.hpp"
#include "graph_pool.hpp"
#include "slab_cache.hpp"
#include "step_plan.hpp"
#include "stretch_library.hpp"
#include "stream_clock.hpp"
#include "gpumem/pool.hpp"

namespace gpumem {
namespace detail {

// Past this a size is a bug, not a request: no device has 128 TiB.
inline constexpr std::size_t absurd_bytes = std::size_t{1} << 47;
static_assert(size_class_of(absurd_bytes) < bin_count, "every plausible request has a bin");

// With several threads, each front cache adds its live bytes to the shared figure in steps of
// this much, so threads do not contend on one counter; the shared peak is then exact to within
// threads x this.
inline constexpr std::ptrdiff_t publish_quantum = std::ptrdiff_t{4} << 20;

// Every front cache's lock, taken from outside (under the pool's lock) with one heavy fence.
class all_fronts_locked {
 public:
  explicit all_fronts_locked(const std::vector<std::unique_ptr<front_cache>>& v) : v_(v) {
    front_lock::lock_all(v_, [](const std::unique_ptr<front_cache>& f) -> front_lock& { return f->lock; });
  }
  // Gives the first `n` back early (their owners need not wait for the rest).
  void release_first(std::size_t n) {
    for (; released_ < n; ++released_) v_[released_]->lock.unlock();
  }
  ~all_fronts_locked() { release_first(v_.size()); }
  all_fronts_locked(const all_fronts_locked&) = delete;
  all_fronts_locked& operator=(const all_fronts_locked&) = delete;

 private:
  const std::vector<std::unique_ptr<front_cache>>& v_;
  std::size_t released_ = 0;
};

// Pools are told apart in thread-local storage by an id never reused, so a thread's entry for a
// destroyed pool never matches a new one at the same address. The registry of live ones
// (pool.cpp) lets a thread's exit hand its front caches back only to pools still alive.
std::uint64_t new_pool_id();
void register_pool(std::uint64_t id);
void unregister_pool(std::uint64_t id);

}  // namespace detail

struct pool::impl {
  // Read on every allocate and free, written never (front_count: once per new thread): one cache
  // line of their own, so the slow path's writes (the lock, counters) do not pull it from other cores.
  alignas(64) detail::pool_config opts;  // the user's options and the policy's settings
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
  // Streams capturing into graph pools (pool_capture.cpp): the common allocate and free read it,
  // on this cache line, and leave everything to the general paths while it is not 0.
  std::atomic<std::uint32_t> captures_underway{0};

  alignas(64) mutable std::mutex m;  // the slow path: clock, arena, slabs, the list of front caches
  detail::stream_clock clock;
  detail::arena arena;
  detail::slab_cache slabs;
  std::vector<std::unique_ptr<detail::front_cache>> fronts;
  std::vector<detail::front_cache*> orphans;  // fronts of ended threads, for the next new one
  std::unordered_map<std::uintptr_t, std::vector<stream_ref>> used_on;  // record_use, under m
  // The step plan (step_plan.hpp). Large blocks skip the front caches (plan_direct): each one is
  // placed by the plan or the arena and recorded, and each free goes back at once. While a single
  // thread uses the pool the plan's state is touched under that thread's front-cache lock (its own
  // calls) or under m with that lock taken as well (anyone else's); once several threads do
  // (plan_shared: PyTorch's backward pass runs on a thread of its own), under m only.
  detail::step_plan plan;
  bool plan_direct = false;      // written under m with every front cache's lock held
  bool plan_shared = false;      // likewise
  std::size_t plan_skip = 0;     // large requests not recorded, after a plan that did not fit
  std::uint64_t plan_moves_mark = 0;  // the arena's maps + unmaps when the plan was laid out
  bool plan_settled = false;     // a step went by without moves: large blocks cached, no recording
  std::uint32_t plan_rejections = 0;
  detail::refused_layouts refused_steps;  // by step_plan::step_signature
  // Layouts of stretches between quiet moments, for when they come again (stretch_library.hpp).
  detail::stretch_library stretches;
  std::uint64_t stretch_unmaps_mark = 0;  // the arena's unmaps when the stretch in progress began
  struct {
    std::uint64_t id, hits, misses;  // the stretch followed now, and the plan's counts at its start
  } stretch_taken{};
  std::uint64_t plan_installs_mark = 0;  // the plans taken up (stretches among them) by then
  pool_stats st;                               // slow-path counters, under m
  detail::graph_pools graphs{up, ord};         // CUDA graph capture, under m
  alignas(64) std::atomic<std::ptrdiff_t> shared_live{0};  // published live bytes
  alignas(64) std::atomic<std::size_t> shared_peak{0};
  // Arena bytes a thread has taken out of its front cache and not yet given back under m.
  alignas(64) std::atomic<std::size_t> in_transit_bytes{0};
  // Reserved bytes as of the last note_reserved (under m), for within_headroom off the lock.
  std::atomic<std::size_t> reserved_published{0};

  impl(upstream& u, ordering& o, const detail::pool_config& op);  // pool_admin.cpp
  ~impl();

  // --- pool.cpp: the calling thread's front cache, and the paths of allocate and free. ---------

  inline detail::front_cache& my_front();
  [[gnu::noinline]] detail::front_cache& find_front();
  inline void orphan(detail::front_cache* fc);
  inline void start_sharing();
  [[gnu::noinline]] void* allocate_general(std::size_t bytes, std::size_t alignment, stream_ref s);
  [[gnu::noinline]] void* allocate_slow(const detail::live_entry& entry, std::size_t alignment, bool small, bool tried);
  [[gnu::noinline]] void deallocate_general(void* ptr, std::size_t bytes, std::size_t alignment, stream_ref s) noexcept;
  [[gnu::noinline]] void deallocate_slow(void* ptr, std::size_t bytes, std::size_t alignment, stream_ref s) noexcept;
  // Blocks no caller holds, back to the slab cache or the arena (under m).
  void give_back(std::uintptr_t a, const detail::live_entry& e, stream_ref s);
  // --- pool_plan.cpp: the step plan's place in the pool. ---------------------------------------
  // A large block the plan placed, from owner `fc`'s own free (its lock held, released here).
  void free_direct(detail::front_cache& fc, std::uint32_t i, std::size_t bytes, stream_ref s) noexcept;
  // Under m: a large block the arena served for owner `fc`, recorded; a plan laid out when a step
  // has been seen whole.
  void plan_saw_alloc(std::uintptr_t a, std::size_t size, std::size_t alignment, stream_ref s);
  // Under m, owner `fc`'s lock held: the laid-out plan takes its region from the arena and starts
  // following. False if the arena could not give it (the plan is dropped).
  bool install_plan(detail::front_cache& fc);
  // Under m, owner `fc`'s lock held: the region for the plan laid out (false: no room within the
  // ceiling, or the arena could not give it; the plan is left as it was).
  bool take_region(detail::front_cache& fc);
  // Under m, owner `fc`'s lock held, a large request at a stretch's start (or a request or two in):
  // a kept stretch that begins with it taken up and its region taken; false if none is or it does
  // not fit.
  bool take_stretch(detail::front_cache& fc, std::size_t size, std::size_t alignment, stream_ref s);
  // Under m: the stretch recorded has ended; kept if the arena moved memory during it.
  void stretch_ended(detail::front_cache& fc);
  // The most a plan's region may be over its step's peak: the reserve ceiling.
  double plan_bound() const;
  // Under m: the recorded step laid out, or rejected if over the ceiling.
  void lay_out_step();
  // Under m: the laid-out plan does not fit; recording resumes after a back-off.
  void reject_plan();
  // Under m, `a` inside the plan's region: a planned block freed by a caller other than its owner.
  void plan_give_back(std::uintptr_t a, stream_ref s, const std::vector<stream_ref>& also);
  // Under m, with the owner's lock held or no other thread: the region back to the arena if the
  // plan has drained.
  void return_plan_region_if_drained();
  // Under m, every front cache's lock held: a second thread came; the plan goes on under m.
  void share_planning();
  // Under m, owner `fc` calling: a job that had settled without a plan moves memory again, so
  // recording starts over (with fc's cached large blocks given back, so every one is seen).
  void rearm_plan_if_moving(detail::front_cache& fc);

  // Zero-on-free: the block is cleared on the freeing stream before anyone else can get it (the
  // events that let other streams reuse it are recorded after this).
  void zero(std::uintptr_t a, const detail::live_entry& e, stream_ref s) {
    up.zero(reinterpret_cast<void*>(a), e.block_bytes, s);
  }
  struct evicted_blocks;
  inline void give_back_evicted(const evicted_blocks& ev, stream_ref s);
  // `publish_due`: what account_quietly said of this free (publish(fc) not yet called).
  [[gnu::noinline]] void free_refused(detail::front_cache& fc, detail::stream_bins& sb, std::uint32_t i, stream_ref s,
                                      bool publish_due = false) noexcept;
  // The common free's end once the block's kind holds front_cache_bytes in `sb` (pool::deallocate).
  [[gnu::noinline]] void free_past_floor(detail::front_cache& fc, detail::stream_bins& sb, std::uint32_t i,
                                         stream_ref s, bool publish_due) noexcept;

  // --- Live-byte accounting, on the fast path. -------------------------------------------------

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
    return fc.unpublished >= detail::publish_quantum || fc.unpublished <= -detail::publish_quantum;
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
  // The common free's end once its block is in a bin (pool::deallocate, free_past_floor): counted,
  // published if due, the front cache's lock (taken by owner_try_lock) released.
  [[gnu::always_inline]] void cached_free_done(detail::front_cache& fc, bool publish_due) {
    ++fc.fast_frees;
    if (publish_due) [[unlikely]]
      return publish_and_unlock(fc);
    fc.lock.owner_unlock_tried();
  }

  void note_reserved() {
    st.reserved_bytes = arena.reserved_bytes();
    reserved_published.store(st.reserved_bytes, std::memory_order_relaxed);
    st.peak_reserved_bytes = std::max(st.peak_reserved_bytes, st.reserved_bytes);
  }

  // --- Front cache budgets, on the fast path. --------------------------------------------------

  // The most bytes of `r`'s kind stream `sb` of front cache `fc` may hold when block `r` comes in
  // (nullptr: slots from the stream's slabs, for fill_bin); front_cache::push checks it against
  // what stream_bins::held holds of that kind (slots and arena blocks are counted apart). By
  // default front_cache_bytes for each kind. Growing first, arena blocks may fill
  // front_cache_grow_fraction of the thread's live bytes (this block included) or
  // front_cache_bytes if that is more, and slots front_cache_bytes plus the share: large blocks
  // are what the front cache must keep to spare the pool's lock. With front_cache_peak_fraction
  // (default policy) the share is of the thread's peak. Below front_cache_bytes every block is
  // welcome: the share is worked out only past it, off the common path.
  [[gnu::always_inline]] std::size_t cache_budget(const detail::front_cache& fc, const detail::stream_bins& sb,
                                                 const detail::block_rec* r) const {
    if (large_budget && sb.held[r ? sb.budget_of(*r) : 0] >= opts.front_cache_bytes) [[unlikely]]
      return grown_budget(fc, r);
    return opts.front_cache_bytes;
  }
  // cache_budget for block `r` once its kind's held bytes have reached front_cache_bytes. Below
  // that cache_budget is front_cache_bytes, which is no more than this, so `held >= full_budget`
  // answers as `held >= cache_budget` does at any held bytes; and nothing it reads changes while a
  // refused free makes room (evictions change no live bytes, no peak, no reserve). So a refused
  // free works it out once for all its steps.
  std::size_t full_budget(const detail::front_cache& fc, const detail::block_rec* r) const {
    return large_budget ? grown_budget(fc, r) : opts.front_cache_bytes;
  }
  // Byte counts are far below 2^63 (a request is at most 2^47 bytes), so they convert as signed
  // integers: one instruction, where an unsigned conversion branches on the top bit.
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
  // live, the pool held both threads' share at once.
  [[gnu::always_inline]] bool within_headroom(const detail::front_cache& fc) const {
    if (fc.peak_live <= fc.live_bytes || opts.front_cache_reserve_headroom <= 0) return false;
    const std::size_t peak = std::max(fc.peak_live, shared_peak.load(std::memory_order_relaxed));
    const std::size_t reserved = reserved_published.load(std::memory_order_relaxed);
    // What initial_reserve_bytes holds is held anyway: caching within it adds nothing.
    return as_double(reserved) <= (1.0 + opts.front_cache_reserve_headroom) * as_double(peak) ||
           reserved <= opts.initial_reserve_bytes;
  }

  // --- pool_capture.cpp: graph pools (gpumem/graph_pool.hpp), off the common paths. -------------

  // nullptr when `s` does not capture: the ordinary path serves it.
  [[gnu::noinline]] void* graph_allocate(std::size_t bytes, std::size_t alignment, stream_ref s);
  // True when the free was a graph pool's block, or deferred because `s` captures.
  [[gnu::noinline]] bool graph_deallocate(void* ptr, std::size_t bytes, std::size_t alignment, stream_ref s) noexcept;
  // Under m, for a pointer no front cache holds: a graph pool's block, freed (or misuse reported).
  bool graph_free_locked(std::uintptr_t a, std::size_t bytes, stream_ref s, misuse_report& bad) noexcept;

  // --- pool_front.cpp: front caches' exchanges with slabs and the arena. -----------------------

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
  std::uint32_t fill_bin(detail::front_cache& fc, detail::stream_bins& sb, std::size_t b, std::size_t size,
                         std::uint32_t n, std::size_t extra);
  [[gnu::noinline]] std::uint32_t front_miss(detail::front_cache& fc, detail::stream_bins& sb, std::size_t b,
                                             std::size_t size, std::size_t alignment, bool small);
  inline std::uint32_t refill(detail::front_cache& fc, detail::stream_bins& sb, std::size_t b, std::size_t size);
  static inline void trim_bin(detail::front_cache& fc, detail::stream_bins& sb, detail::bin& x, std::uint32_t keep);
  [[gnu::noinline]] bool cache_freed(detail::front_cache& fc, detail::stream_bins& sb, std::uint32_t i,
                                     evicted_blocks& ev);
  inline void trim_for(detail::front_cache& fc, detail::stream_bins& sb, const detail::block_rec& r, std::size_t budget);
  inline bool make_room(detail::front_cache& fc, detail::stream_bins& sb, std::uint32_t i, std::size_t budget,
                 evicted_blocks& ev);
  void flush_fronts();
  void flush_front(detail::front_cache& f);

  // --- pool_reclaim.cpp: a request no front cache serves. --------------------------------------

  // `own`: the caller's front cache, if it has one of its own. Returns the address, or 0 (`why`
  // then says what refused).
  std::uintptr_t take(std::size_t bytes, std::size_t alignment, stream_ref s, detail::slab*& sl, std::string& why,
                      detail::front_cache* own);
  template <class Attempt>
  inline std::uintptr_t reclaim(detail::front_cache* own, Attempt&& attempt);
  template <class Attempt>
  inline std::uintptr_t take_back_others(const detail::front_cache* own, std::size_t size, stream_ref s, Attempt& attempt);
  void promote_ready();
  inline bool give_back_fitting(detail::front_cache& f, stream_ref s, std::size_t size);
  inline std::uintptr_t take_mapped_or_own(std::size_t size, std::size_t alignment, stream_ref s, detail::front_cache& own,
                                    std::string& why);
  inline bool give_back_large(detail::front_cache& f, std::optional<stream_ref> only = std::nullopt);
  void release_all_cached();
  std::size_t ceiling_for(const detail::front_cache& fc, std::size_t size) const;
  [[noreturn]] void throw_oom(std::size_t bytes, std::size_t alignment, stream_ref s, std::string why);

  // --- pool_inspect.cpp. -----------------------------------------------------------------------

  std::size_t exact_live() const;
  std::size_t sum_live() const;
  misuse_report classify_unknown(std::uintptr_t a, std::size_t bytes) const;
};

}  // namespace gpumem
