#pragma once
// The pool policy's own settings: not part of gpumem::pool_options, not installed, not settable
// from the CLI, GPUMEM_CONFIG or Python. The library's defaults are what every user gets; tests,
// benchmarks and the doctor's comparisons set these through the internal constructor
// pool(upstream&, ordering&, const pool_options&, const detail::pool_tuning&).
//
// Two policies: by default (grow_before_reclaim false) the pool keeps reserved memory as close to
// peak live as it can, reusing and moving what it holds before it grows; growing first, it grows
// when nothing cached fits and reclaims only when growing fails, as PyTorch's and CUB's caching
// allocators do: faster with many threads, at more reserved memory.
#include <cstddef>
#include <cstdint>
#include <functional>

#include "gpumem/pool.hpp"

namespace gpumem::detail {

struct pool_tuning {
  // Plain upstreams: the least a new segment asks for.
  std::size_t min_segment_bytes = std::size_t{2} << 20;
  // Virtual upstreams: the size of the reserved address range; 0 = 4x the device's capacity.
  std::size_t address_range_bytes = 0;
  // Virtual upstreams: idle mapped memory (free granules no block touches) the pool keeps mapped,
  // as a fraction of live memory. Below it the pool grows rather than unmap idle granules and map
  // them again elsewhere, each granule a driver call on a GPU. 0 is the tightest: reserved never
  // grows while an idle granule is left. More trades memory for fewer driver calls. Not applied
  // when the upstream or max_reserved_bytes refuses to grow. By default 1: below the reserve
  // ceiling the pool grows rather than move memory.
  double idle_budget = 1.0;
  // Virtual upstreams: the most peak reserved may be over peak live where moving memory can keep
  // it there (0: no ceiling; else at least 1). A request that would take reserved past
  // reserve_ceiling x max(peak live, live + the request) moves idle granules, and memory its own
  // stream freed, before it grows, whatever idle_budget says; the idle budget then spares driver
  // calls only below the ceiling. Live figures are the calling thread's exact ones when it is the
  // pool's only thread, else those threads publish in steps. A target, not a limit: when no memory
  // can be moved the pool grows past it. By default 1.03: memory moves only to stay within it.
  double reserve_ceiling = 1.03;
  // Virtual upstreams: the largest physical handle the pool creates when it grows; each run of
  // granules a request needs gets handles of up to this size, each mapped in one piece. Larger
  // handles cost fewer driver calls and copy faster, but a handle moves only whole, so one that
  // still holds a live block cannot lend its idle granules elsewhere. 0 picks by policy: one
  // granule per handle (the finest reuse), 32 MiB growing first.
  std::size_t max_handle_bytes = 0;
  // When a request finds nothing cached: false first empties the front caches and gives back
  // empty slabs, so caching never makes the pool grow, and grows only if that was not enough;
  // true grows first, and empties caches, gives back empty slabs and remaps idle granules only
  // when growing fails. With many threads the tight way is slow: any thread's miss empties every
  // thread's cache under the pool's lock (small requests with several threads take a new slab
  // first: pool_reclaim.cpp). Growing first, a large request may also take a cached
  // block somewhat larger than itself, front caches keep large blocks up to
  // front_cache_grow_fraction of live, and on a virtual upstream without initial_reserve_bytes
  // slabs come from a half of the address range of their own (the slab zone).
  bool grow_before_reclaim = false;
  // Per-thread, per-stream front caches: the lock-free common path. Off, every request takes the
  // pool's lock (for comparison and debugging).
  bool front_cache = true;
  // The most bytes of small blocks (slots), and apart from them of large blocks, one thread's
  // front cache keeps for one stream before it hands blocks back. Front caches are flushed before
  // the pool grows, so by default caching never adds reserved memory; growing first they are
  // flushed only when growing fails, and large blocks get front_cache_grow_fraction of live where
  // that is more. A large block freed when its budget is spent evicts the oldest cached large
  // blocks (pool_stats::front_evictions), unless it alone is over the budget.
  std::size_t front_cache_bytes = std::size_t{32} << 20;
  // Growing first: the bytes of large blocks (over small_max_bytes) one thread's front cache may
  // keep for one stream, as a fraction of that thread's live bytes (front_cache_bytes if that is
  // more). A larger share sends fewer large requests to the pool's lock, and holds more memory no
  // other size can use. 0: front_cache_bytes alone.
  double front_cache_grow_fraction = 0.25;
  // Growing first: while reserved memory is within this fraction over peak live, a thread's front
  // cache may keep large blocks up to what it freed since its own peak (a training step frees its
  // activations in the backward pass and asks for the same shapes in the next forward pass).
  // Blocks cached this way cannot coalesce in the arena, so this fraction bounds what the pool
  // spends on them. 0: off.
  double front_cache_reserve_headroom = 0.1;
  // Default policy: large blocks one thread's front cache may keep for one stream, as a fraction of
  // that thread's peak live bytes (front_cache_bytes if that is more). Blocks parked in front
  // caches cannot coalesce in the arena, so moves may rise. 0: front_cache_bytes alone.
  double front_cache_peak_fraction = 0.0;
  // Default policy: a large request that finds nothing cached first looks for a place on mapped
  // memory (no granule mapped or unmapped), then carves a large enough block its own front cache
  // keeps, then gives back its own front cache's large blocks and looks again, all before idle
  // granules are remapped or other threads' caches emptied.
  bool reclaim_own_first = false;
  // Default policy: before the pool grows, the host waits for the streams' pending frees (the
  // events the pool recorded after them) and tries again with what they free. Stalls the host,
  // not the device (stream_ordered_moves covers most of this without a wait).
  bool wait_before_grow = false;
  // Virtual upstreams: the most host time the pool spends moving idle granules, as a fraction of
  // wall time; 0: no bound. A bucket of host time fills at this fraction of the time that passes
  // (up to one second's worth) and is drawn on by each move's measured driver time; while it is
  // empty a request that needs granules grows instead, until growing fails.
  double remap_time_budget = 0.0;
  // With remap_time_budget: each granule moved is charged at least this many ns (the simulated
  // device's calls cost nothing).
  double remap_cost_ns_per_granule = 0.0;
  // With remap_time_budget: the clock the budget runs on, in ns (empty: std::chrono::steady_clock).
  std::function<std::uint64_t()> remap_clock_ns{};
  // Virtual upstreams: a request on stream S may take memory S freed whose work is still queued on
  // the device. S's new work runs after the free, so the pool maps the same physical memory a
  // second time where S's request needs it, and unmaps the old place once S has run past the frees
  // in it: no host wait, no growth, and no other stream sees the memory early. Off only to compare.
  bool stream_ordered_moves = true;
  // One thread's large blocks are placed by a layout learned from an earlier step of the job once
  // it repeats itself (the step plan, docs/design.md), and go back to the arena when freed
  // instead of into the front cache. Off: large blocks are cached per thread as with several
  // threads; for comparison and for tests of the front caches.
  bool step_plan = true;
};

// What the pool runs on: the user's options and the policy's settings in one object, so the
// allocator's code reads every setting as `opts.name`.
struct pool_config : pool_options, pool_tuning {
  pool_config() = default;
  // Implicit, so that a pool_options goes wherever a pool_config is taken, with the default tuning.
  pool_config(const pool_options& o, const pool_tuning& t = {}) : pool_options(o), pool_tuning(t) {}
};

// Throws std::invalid_argument ("gpumem::pool: idle_budget -1 is not a fraction >= 0") for the
// first number out of its range. The pool's constructor calls it.
void check_pool_tuning(const pool_tuning& t);

}  // namespace gpumem::detail
