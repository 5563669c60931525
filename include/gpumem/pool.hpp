#pragma once
// gpumem::pool — the stream-ordered caching pool. CUDA-free: it reaches memory only through an
// `upstream` and streams only through an `ordering`, so the same code runs on the simulated device
// and on a GPU.
#include <cstddef>
#include <functional>
#include <limits>
#include <memory>
#include <vector>
#include <cstdint>

#include "gpumem/core.hpp"
#include "gpumem/errors.hpp"
#include "gpumem/pool_stats.hpp"
#include "gpumem/resource.hpp"
#include "gpumem/upstream.hpp"

namespace gpumem {

// How a pool behaves. Each field a user may set from text (the CLI, GPUMEM_CONFIG, bench's
// pool_options column) has a row in pool_option_table.cpp: add one there with a new field.
//
// Two policies: by default (grow_before_reclaim false) the pool keeps reserved memory as close to
// peak live as it can, reusing and moving what it holds before it grows; growing first, it grows
// when nothing cached fits and reclaims only when growing fails, as PyTorch's and CUB's caching
// allocators do: faster with many threads, at more reserved memory.
struct pool_options {
  // Requests up to this size (at most 1 MiB) come from slabs carved into slots of their size
  // class. Lower it to serve mid-size requests from the arena instead of slabs.
  std::size_t small_max_bytes = std::size_t{1} << 20;
  // Plain upstreams: the least a new segment asks for. Raise it to make fewer, larger upstream
  // allocations.
  std::size_t min_segment_bytes = std::size_t{2} << 20;
  // Cached bytes above this go back to the upstream at once (virtual upstreams unmap whole free
  // granules; plain ones free whole free segments). max() keeps everything, as cudaMallocAsync
  // with its release threshold at its maximum. Lower it when other users of the device need the
  // memory the pool caches.
  std::size_t release_threshold_bytes = std::numeric_limits<std::size_t>::max();
  // The pool never holds more than this from its upstream; past it a request throws
  // out_of_memory. Set it to share a device with other jobs.
  std::size_t max_reserved_bytes = std::numeric_limits<std::size_t>::max();
  // Virtual upstreams: the size of the reserved address range; 0 = 4x the device's capacity.
  // Raise it only if a job's address layout exhausts the range (the error says so).
  std::size_t address_range_bytes = 0;
  // Virtual upstreams: idle mapped memory (free granules no block touches) the pool keeps mapped,
  // as a fraction of live memory. Below it the pool grows rather than unmap idle granules and map
  // them again elsewhere, each granule a driver call on a GPU. 0 is the tightest: reserved never
  // grows while an idle granule is left. Raise it (e.g. 0.1) to trade memory for fewer driver
  // calls. Not applied when the upstream or max_reserved_bytes refuses to grow.
  double idle_budget = 1.0;
  // Virtual upstreams: the most peak reserved may be over peak live where moving memory can keep
  // it there (0, the default: no ceiling; else at least 1). A request that would take reserved
  // past reserve_ceiling x max(peak live, live + the request) moves idle granules, and memory its
  // own stream freed, before it grows, whatever idle_budget says; the idle budget then spares
  // driver calls only below the ceiling. Live figures are the calling thread's exact ones when it
  // is the pool's only thread, else those threads publish in steps. A target, not a limit: when no
  // memory can be moved the pool grows past it (use max_reserved_bytes for a limit). Set it with
  // an idle budget to bound what that budget costs in memory.
  double reserve_ceiling = 1.03;
  // Virtual upstreams: the largest physical handle the pool creates when it grows; each run of
  // granules a request needs gets handles of up to this size, each mapped in one piece. Larger
  // handles cost fewer driver calls and copy faster, but a handle moves only whole, so one that
  // still holds a live block cannot lend its idle granules elsewhere. 0 (the default) picks by
  // policy: one granule per handle (the finest reuse), 32 MiB growing first. A job that grows
  // first close to the device's limit should set this to the granule.
  std::size_t max_handle_bytes = 0;
  // When a request finds nothing cached: false (the default) first empties the front caches and
  // gives back empty slabs, so caching never makes the pool grow, and grows only if that was not
  // enough; true grows first, and empties caches, gives back empty slabs and remaps idle granules
  // only when growing fails, as PyTorch's and CUB's caching allocators do. With many threads the
  // tight way is slow: any thread's miss empties every thread's cache under the pool's lock. Set
  // it for throughput with many threads, at the cost of more reserved memory. Growing first, a
  // large request may also take a cached block somewhat larger than itself, front caches keep
  // large blocks up to front_cache_grow_fraction of live, and on a virtual upstream without
  // initial_reserve_bytes slabs come from a half of the address range of their own (the slab zone).
  bool grow_before_reclaim = false;
  // Per-thread, per-stream front caches: the lock-free common path. Off, every request takes the
  // pool's lock (for comparison and debugging).
  bool front_cache = true;
  // The most bytes of small blocks (slots), and apart from them of large blocks, one thread's
  // front cache keeps for one stream before it hands blocks back. Front caches are flushed before
  // the pool grows, so by default caching never adds reserved memory; growing first they are
  // flushed only when growing fails, and large blocks get front_cache_grow_fraction of live where
  // that is more. A large block freed when its budget is spent evicts the oldest cached large
  // blocks (pool_stats::front_evictions), unless it alone is over the budget. Raise it for jobs
  // whose repeated blocks do not fit.
  std::size_t front_cache_bytes = std::size_t{32} << 20;
  // Freed memory is zeroed on the freeing stream before another user can get it (multi-tenant
  // services). Needs an upstream that can fill memory; the simulator has none.
  bool zero_on_free = false;
  // With grow_before_reclaim: the bytes of large blocks (over small_max_bytes) one thread's front
  // cache may keep for one stream, as a fraction of that thread's live bytes (front_cache_bytes if
  // that is more). A large request that finds no block of its class cached goes to the pool's lock
  // and the arena's best fit; a larger share sends fewer there, and holds more memory no other
  // size can use. 0: front_cache_bytes alone.
  double front_cache_grow_fraction = 0.25;
  // With grow_before_reclaim: while reserved memory is within this fraction over peak live, a
  // thread's front cache may keep large blocks up to what it freed since its own peak. A training
  // step frees its activations in the backward pass and asks for the same shapes in the next
  // forward pass; this keeps them in the front cache. Blocks cached this way cannot coalesce in the
  // arena, so they may make the pool grow: this fraction bounds what the pool spends on that. 0: off.
  double front_cache_reserve_headroom = 0.1;
  // Default policy: large blocks one thread's front cache may keep for one stream, as a fraction of
  // that thread's peak live bytes (front_cache_bytes if that is more). Lets a job whose large
  // tensors repeat from step to step take them from its front cache instead of the pool's lock;
  // but blocks parked in front caches cannot coalesce in the arena, so moves may rise. 0 (the
  // default): front_cache_bytes alone.
  double front_cache_peak_fraction = 0.0;
  // Default policy: a large request that finds nothing cached first looks for a place on mapped
  // memory (no granule mapped or unmapped), then carves a large enough block its own front cache
  // keeps, then gives back its own front cache's large blocks and looks again, all before idle
  // granules are remapped or other threads' caches emptied. Fewer moves for some jobs, more for
  // others: try it when moves dominate.
  bool reclaim_own_first = false;
  // Default policy: before the pool grows, the host waits for the streams' pending frees (the
  // events the pool recorded after them) and tries again with what they free. On a GPU the host
  // runs ahead of the device, and memory freed on a stream whose work has not reached the free
  // cannot be moved, so without waiting the pool grows beside it. The wait stalls the host, not
  // the device. Set it when reserved memory matters more than host latency (stream_ordered_moves
  // covers most of this without a wait).
  bool wait_before_grow = false;
  // Virtual upstreams: the most host time the pool spends moving idle granules (unmapping them
  // and mapping them again where a request needs them), as a fraction of wall time; 0 (the
  // default): no bound. The pool keeps a bucket of host time that fills at this fraction of the
  // time that passes (up to one second's worth) and is drawn on by each move's measured driver
  // time; while it is empty a request that needs granules grows instead, until growing fails. The
  // idle budget bounds memory and lets time float; this bounds time and lets memory float. Set it
  // (e.g. 0.02) when moves cost a job too much time.
  double remap_time_budget = 0.0;
  // With remap_time_budget: each granule moved is charged at least this many ns. The simulated
  // device's calls cost nothing; set it to a GPU's cost to see there what the budget would do.
  double remap_cost_ns_per_granule = 0.0;
  // With remap_time_budget: the clock the budget runs on, in ns (empty: std::chrono::steady_clock).
  // For tests that step time by hand.
  std::function<std::uint64_t()> remap_clock_ns{};
  // Virtual upstreams: a request on stream S may take memory S freed whose work is still queued on
  // the device. S's new work runs after the free, so the pool maps the same physical memory a
  // second time where S's request needs it, and unmaps the old place once S has run past the frees
  // in it: no host wait, no growth, and no other stream sees the memory early. Costs what a move
  // costs (a map now, an unmap later), under the same idle and remap time budgets. Turn it off
  // only to compare.
  bool stream_ordered_moves = true;
  // Bytes the pool reserves from its upstream when it is made (whole granules on a virtual
  // upstream, mapped; one segment on a plain one), as RMM's pool_memory_resource's initial size:
  // a job whose memory fits pays no growth while it warms up, and the memory is counted in reserved
  // from the start. Growing first, the front caches may fill it with large blocks. 0 (the
  // default): none; the pool grows as requests come. Throws out_of_memory at construction if the
  // upstream (or max_reserved_bytes) refuses it, and std::invalid_argument if it is over
  // release_threshold_bytes. trim() gives it back like any cached memory.
  std::size_t initial_reserve_bytes = 0;
  // One thread's large blocks are placed by a layout learned from an earlier step of the job once
  // it repeats itself (the step plan, docs/design.md), and go back to the arena when freed
  // instead of into the front cache. Off: large blocks are cached per thread as with several
  // threads. For comparison and for tests of the front caches.
  bool step_plan = true;
};

// One range the pool tracks, for segment maps and reports.
struct block_info {
  enum class state : std::uint8_t { live, cached, unmapped };
  std::uintptr_t address = 0;
  std::size_t bytes = 0;
  state st = state::cached;
  stream_ref stream = {};     // live: the allocating stream; cached: the owning stream (0 if ready)
  std::size_t segment = 0;    // index of the segment / virtual range it lies in
};

class pool {
 public:
  pool(upstream& up, ordering& ord, pool_options opts = {});
  ~pool();
  pool(const pool&) = delete;
  pool& operator=(const pool&) = delete;

  // Throws std::invalid_argument (alignment not a power of two or over the granule, size absurd),
  // out_of_memory (after releasing caches and waiting for pending frees), or the upstream's error.
  // A size of 0 returns nullptr.
  void* allocate(std::size_t bytes, std::size_t alignment = default_alignment, stream_ref s = {});
  // `bytes` and `alignment` must be what was asked at allocate; `s` is the stream after whose
  // current work `p` is unused. Misuse (unknown pointer, double free, size mismatch) goes to the
  // misuse handler. nullptr is ignored.
  void deallocate(void* p, std::size_t bytes, std::size_t alignment = default_alignment,
                  stream_ref s = {}) noexcept;
  void* allocate(std::size_t bytes, stream_ref s) { return allocate(bytes, default_alignment, s); }
  void deallocate(void* p, std::size_t bytes, stream_ref s) noexcept {
    deallocate(p, bytes, default_alignment, s);
  }

  // PyTorch's record_stream: `p` is also used on `s`. Its memory becomes reusable only after the
  // work enqueued on every such stream before the free has finished.
  void record_use(void* p, stream_ref s);

  // Call before destroying stream `s`: waits for the work on `s` that the pool's frees depend on,
  // makes what `s` owned reusable by every stream, and forgets `s`, so the pool never records an
  // event on it again. Blocks still live keep working; free them on a stream that exists.
  void release_stream(stream_ref s);

  // Hands back everything cached: front caches, empty slabs, free segments / free granules.
  // Waits for pending frees first.
  void trim();

  // Gives every block the front caches keep, and every empty slab, back to the pool's free memory
  // — and nothing back to the device: no driver call, no wait for any stream. For a job that
  // repeats itself, called where a step ends: placement goes by address alone, so a step that
  // starts from the layout the first step started from lands where the first step landed, on
  // memory mapped then. Otherwise what stays cached across a step's end (slabs and cached blocks
  // where the first step carved them) is in the way of the next step's large requests, which then
  // grow. The next step pays its front-cache misses again until the caches refill. Blocks freed
  // on a stream whose work is still queued stay that stream's.
  void settle();

  pool_stats stats() const;
  // Resets the peaks to the current values.
  void reset_peaks();
  const pool_options& options() const noexcept;

  // Checks every internal invariant (no overlapping blocks, accounting adds up, index consistent);
  // throws std::logic_error naming the first one broken. For tests and fuzzers; O(blocks).
  void check_invariants() const;

  // Every block in address order, live and free; free ranges whose granules are unmapped show as
  // `unmapped`. Flushes nothing; O(blocks).
  std::vector<block_info> blocks() const;

  bool operator==(const pool& o) const noexcept { return this == &o; }

  struct impl;

 private:
  std::unique_ptr<impl> impl_;
};

static_assert(resource<pool>);

}  // namespace gpumem
