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

// Each field a user may set from text (the CLI, GPUMEM_CONFIG, bench's pool_options column) has a
// row in pool_option_table.cpp: add one there with a new field.
struct pool_options {
  // Requests up to this size come from slabs carved into slots of their size class (at most 1 MiB).
  // Measured on the shared traces: 64 KiB, 256 KiB and 1 MiB give the same fragmentation (within
  // 0.003); 1 MiB lets the front caches reuse mid-size blocks by class, not only by exact size.
  std::size_t small_max_bytes = std::size_t{1} << 20;
  // Plain upstreams: the least a new segment asks for.
  std::size_t min_segment_bytes = std::size_t{2} << 20;
  // Cached bytes above this are given back to the upstream at once (virtual upstreams unmap whole
  // free granules; plain ones free whole free segments). max() keeps everything, like
  // cudaMallocAsync with its release threshold at its maximum.
  std::size_t release_threshold_bytes = std::numeric_limits<std::size_t>::max();
  // The pool never holds more than this from its upstream; past it a request throws out_of_memory.
  std::size_t max_reserved_bytes = std::numeric_limits<std::size_t>::max();
  // Virtual upstreams: height of the reserved address range; 0 = 4x the device's capacity.
  std::size_t address_range_bytes = 0;
  // Virtual upstreams: idle mapped memory (free granules no block touches) the pool keeps mapped,
  // as a fraction of live memory: below it the pool grows rather than unmap idle granules and map
  // them again elsewhere (on a GPU each granule mapped or unmapped is a driver call of tens of µs).
  // 0: reserved never grows while an idle granule is left — the tightest. Higher trades memory
  // for driver calls; measured on the `churn` pattern (design notes): 0.1 cut granules remapped
  // from ~80 to ~4 per 1000 ops at 1.12x peak live, 0.25 to ~0.6 at 1.15x; on the H200 churn took
  // 26-34 µs per op at 0, 3.6 µs at 0.1 and 0.45-1.4 µs at 0.25 (bench/RESULTS.md). Not applied
  // when the upstream or max_reserved_bytes refuses to grow.
  double idle_budget = 0.0;
  // Virtual upstreams: the most peak reserved may be over peak live, where moving memory can
  // keep it there (0, the default: no ceiling; else at least 1). A request that would take
  // reserved past reserve_ceiling x max(peak live, live + the request) moves idle granules, and
  // memory its own stream freed, before it grows, whatever idle_budget says. The idle budget then
  // spares driver calls only below the ceiling: with the device 50 operations behind, idle_budget
  // 0.05 reserved 1.034 / 1.043 of peak live on the bert / llama traces at 124 / 8.7 granules moved
  // per 1000 operations, and with a ceiling of 1.03, 1.030 / 1.029 at 153 / 7.5 (resnet: 1.023 at
  // 42.8 either way). Growing first it does little: what that policy holds beyond live memory is
  // in front caches and slabs, not idle granules (bert 1.306 with or without it). Live and peak
  // live are the calling thread's exact figures when it is the pool's only thread, else the
  // figures threads publish in steps of 1 MiB. It is a target, not a limit: when no memory can be
  // moved the pool grows past it (use max_reserved_bytes for a limit), and what front caches and
  // slabs hold counts as live to it.
  double reserve_ceiling = 0.0;
  // Virtual upstreams: the largest physical handle the pool creates when it grows. Each run of
  // granules a request needs mapped gets handles of up to this size, each mapped in one piece.
  // Larger handles cost fewer driver calls and stream faster through cudaMemcpy: on the H200 a
  // mapping costs the same driver time at 2 MiB as at 128 MiB, and a device-to-device copy ran at
  // 3.1 TB/s over 2 MiB handles, 4.0 over 8 MiB and 4.13 over 32 MiB against 4.2 over cudaMalloc's
  // memory (kernels read and wrote all of them at the same speed; bench/RESULTS.md). But a handle
  // is unmapped and moved only whole, so one that still holds a live block cannot lend its idle
  // granules elsewhere: under the default policy 8 MiB handles raised peak reserved / peak live on
  // the shared traces from 1.015 to 1.05, 32 MiB to 1.15. 0 (the default) picks by policy: one
  // granule per handle by default (the finest reuse), 32 MiB with grow_before_reclaim (which does
  // not move idle granules while it can grow; there 32 MiB handles left peak reserved unchanged and
  // cut cuMemCreate calls 10x on the traces). Near the device's limit that policy must move them
  // after all, and a large handle with one live block cannot: a job that runs close to the device's
  // memory growing first should set this to the granule.
  std::size_t max_handle_bytes = 0;
  // When a request finds nothing cached: false (the default) first empties the front caches and
  // gives back empty slabs — caching never makes the pool grow, the tightest — and grows only if
  // that was not enough; true grows first, and empties caches, gives back empty slabs and remaps
  // idle granules (whatever idle_budget says) only when growing fails (the upstream or
  // max_reserved_bytes refuses), as PyTorch's and CUB's caching allocators do. With
  // many threads the tight way is the wall: any thread's miss empties every thread's caches under
  // the pool's lock, and they all carve their slabs again through it. Measured on the H200 with the
  // threads pattern (bench/RESULTS.md, session 4): 1 / 4 / 16 threads 20 / 4.7 / 4.5 Mops/s by
  // default, 37 / 137 / 457 with true; churn 41 µs -> 456 ns per op; peak reserved / peak live on
  // the shared traces 1.015 / 1.019 / 1.012 -> 1.306 / 1.277 / 1.031 (bert / llama / resnet).
  // Growing first, a large request also takes a cached block somewhat larger than itself (of its
  // size class or the next two), the front caches keep large blocks up to front_cache_grow_fraction
  // of live, and before growing for one the pool carves it from a large enough block the caller's
  // front cache keeps. On a virtual upstream without initial_reserve_bytes it also carves slabs
  // from a half of the address range of their own (the glossary's slab zone), so a slab never
  // splits the memory large blocks leave: bert's second replay pass then mapped 18 granules more
  // than its first instead of 48, at 1.427 of peak live instead of 1.488 (design notes, session 19).
  bool grow_before_reclaim = false;
  // Per-thread, per-stream front caches: the lock-free common path.
  bool front_cache = true;
  // Most bytes of small blocks (slots), and apart from them of large blocks, one thread's front
  // cache keeps for one stream before it hands blocks back (two budgets: with one for both, large
  // blocks filled it and no small free was cached). Large is safe by default: front caches are
  // flushed before the pool grows, so caching never adds reserved memory. With
  // grow_before_reclaim they are flushed only when growing fails, so what they keep adds to
  // reserved: there large blocks get front_cache_grow_fraction of live instead where that is more.
  // A large block freed when its budget is spent makes room: the oldest cached large blocks go
  // back to the pool (pool_stats::front_evictions), unless it alone is more than the budget.
  std::size_t front_cache_bytes = std::size_t{32} << 20;
  // Freed memory is zeroed before another user can get it (multi-tenant services). Needs an
  // upstream that can fill memory; a no-op on the simulator, which has none.
  bool zero_on_free = false;
  // With grow_before_reclaim: the bytes of large blocks (over small_max_bytes) one thread's front
  // cache may keep for one stream, as a fraction of that thread's live bytes (front_cache_bytes if
  // that is more); small blocks keep front_cache_bytes of room beside them. Growing first, a cached
  // block is memory the pool holds that no other size can use; but a large request goes to the
  // pool's lock and the arena's best fit (~1 µs) unless a block of its size class is cached, and
  // the churn pattern (1000 live blocks, 256 B - 64 MiB) spreads its large ones over 48 classes.
  // Measured on the simulator: churn sent 29% / 5.6% / 2.6% of its allocations to the pool's lock
  // at 0 / 0.125 / 0.25, at peak reserved / peak live 1.17 / 1.33 / 1.38 (`bench churn` with 0.25:
  // ~45 ns per op); the shared traces gave 1.306 / 1.324 / 1.031 at 0 and 1.306 / 1.306 / 1.046 at
  // 0.25 (bert / llama / resnet; llama's figure moves by ±0.03 with any change of placement). 0:
  // front_cache_bytes alone.
  double front_cache_grow_fraction = 0.25;
  // With grow_before_reclaim: while the pool's reserved memory is within this fraction over its
  // peak live bytes, a thread's front cache may keep large blocks up to what it freed since its own
  // peak (its peak live bytes less its live bytes now, where that is more than the share above).
  // A training step frees its activations in the backward pass just when live bytes fall, and asks
  // for the same shapes in the next forward pass; a budget that follows live bytes sent half of
  // resnet's large requests to the pool's lock (a miss through the arena costs ~2,400
  // instructions, a block it evicts ~1,300). Blocks cached this way are memory the pool already
  // holds, but they cannot coalesce in the arena, so they may make it grow: this fraction is the
  // most reserved memory the pool spends on that, since once reserved passes it the budget falls
  // back to the share of live. Within it a full bin of large blocks also widens once, to twice
  // its limit. Measured (bench/RESULTS.md, session 15): resnet's warm replay 14,128 -> 15,653
  // front hits of 16,816 requests, 554 -> 380 instructions per op, on the H200 0.49-0.50 of the
  // time, at peak reserved / peak live 1.0415 -> 1.076; bert (1.49) and llama (1.45), past the
  // headroom by growing first alone, unchanged. 0: off.
  double front_cache_reserve_headroom = 0.1;
  // Default policy: large blocks (over small_max_bytes) one thread's front cache may keep for one
  // stream, as a fraction of that thread's peak live bytes (front_cache_bytes if that is more). The
  // default policy flushes the front caches before it grows, so what they keep never adds reserved
  // memory; a larger share lets a job whose large tensors repeat from step to step (an inference
  // server's batches, a training step's activations) take them from its front cache instead of the
  // pool's lock. Relative to the peak, not to live bytes now: between two steps live memory falls
  // to the weights, just when the step's blocks come back. 0: front_cache_bytes alone. Measured on
  // the H200 at 1.0 (bench/RESULTS.md, session 6): bert's replay 96.5 % front-cache hits (65 % at
  // 0) and half the remapping, but llama's remapping doubled and resnet's rose: blocks parked in
  // front caches cannot coalesce in the arena. Off by default for that.
  double front_cache_peak_fraction = 0.0;
  // Default policy: a large request that finds nothing cached first looks for a place on mapped
  // memory (no granule mapped or unmapped), then carves a large enough block its own front cache
  // keeps, then gives back its own front cache's large blocks and looks again — all before idle
  // granules are remapped (each a driver call of tens of µs on a GPU) or other threads' caches
  // emptied.
  // Measured on the H200 (session 6): bert's and resnet's replay remapped a third to a half less
  // (resnet warm 1,409 -> 708 ns per op), llama +3-16 % and churn +24 % slower. Off by default.
  bool reclaim_own_first = false;
  // Default policy: before the pool grows, the host waits for the streams' pending frees (the
  // events the pool recorded after them) and tries again with what they free. On a GPU the host
  // runs ahead of the device: memory freed on a stream whose work has not reached the free cannot
  // be unmapped and moved, so without waiting the pool grows beside it. A recorded BERT inference
  // (PyTorch, H200) replayed at 1.045x peak live on the simulator, where events complete at once,
  // and reserved 1.284x live on the GPU. The wait stalls the host, not the device: the GPU keeps
  // running the work already queued.
  bool wait_before_grow = false;
  // Virtual upstreams: the most host time the pool spends moving idle granules (unmapping them and
  // mapping them again where a request needs them), as a fraction of wall time; 0 (the default):
  // no bound. Moving granules is what keeps the reserve tight, and on a GPU each granule moved
  // costs tens of µs of the caller's time (36-56 µs on the H200, bench/RESULTS.md). The pool keeps
  // a bucket of host time that fills at this fraction of the time that passes (up to one second's
  // worth) and is drawn on by each move's measured driver time; while it is empty a request that
  // needs granules grows instead of moving idle ones, until growing fails. So the pool spends at
  // most about this share of a job's time on moves, whatever the job's shapes, and the reserve is
  // as tight as that allows. The idle budget bounds memory and lets time float; this bounds time
  // and lets memory float: on a job whose live memory falls to nothing between steps (bert's
  // trace), no idle budget spares a move (bench/RESULTS.md, session 7). Measured on the H200 at
  // 0.02: warm replay of bert / llama / resnet 205 / 72 / 300 ns per op at 1.280 / 1.271 / 1.022
  // peak reserved / peak live (default 2,345 / 115 / 1,019 at 1.015 / 1.015 / 1.011; growing first
  // 258 / 92 / 159 at 1.306 / 1.306 / 1.046); churn 2.8 µs at 1.173 (28 µs at 1.036; 75 ns at
  // 1.349). Live models (BERT, GPT-2) spent 0.14-0.17 % of their time on moves: there it seldom binds.
  double remap_time_budget = 0.0;
  // With remap_time_budget: each granule moved is charged at least this many ns. The simulated
  // device's calls cost nothing; set it to a GPU's cost to see there what the budget would do.
  double remap_cost_ns_per_granule = 0.0;
  // With remap_time_budget: the clock the budget runs on, in ns (empty: std::chrono::steady_clock).
  // For tests that step time by hand.
  std::function<std::uint64_t()> remap_clock_ns{};
  // Virtual upstreams: a request on stream S may take memory S freed whose work is still queued
  // on the device. On a GPU the host runs ahead, and memory freed on S stays busy until S's work
  // reaches the free: it cannot be unmapped and moved, so the tight policy grew beside it (a BERT
  // inference on the H200: 1.28x live, where the same requests replayed at 1.045 on a device that
  // keeps up). S's new work is queued behind the free, so S may use that memory now: the pool maps
  // the same physical memory a second time where S's request needs it, and unmaps the old place
  // once S has run past the frees in it. No host wait, no growth, and no other stream ever sees
  // the memory early. Costs what a move costs (a map now, an unmap later), under the same idle
  // and remap time budgets. Replayed on a device that finishes its work only every 50 operations
  // (`gpumem replay --device-lag 50`), peak reserved / peak live on bert / llama / resnet went
  // from 1.280 / 1.265 / 1.023 to 1.015 / 1.019 / 1.012 (1.015 / 1.015 / 1.011 when the device
  // keeps up, where it changes nothing), with no host wait; live on the H200 (session 8, when
  // moved memory still kept off a request's edge granules),
  // peak reserved / peak allocated BERT 1.094-1.103 (1.252-1.284 without), GPT-2 1.044 (1.078),
  // CuPy 1.091 (1.122), ResNet-50 and Llama unchanged; BERT then moves ~200 granules per step
  // instead of ~45; its step time, 1.16-1.32x native's against 1.02-1.09x over two or three runs
  // and 1.282x against 1.271x over five, is noise-level on that machine (bench/RESULTS.md,
  // session 8). remap_time_budget bounds these moves' time too.
  bool stream_ordered_moves = true;
  // Bytes the pool reserves from its upstream when it is made (rounded up to whole granules on a
  // virtual upstream, mapped; one segment on a plain one): the "reserve a large region, then
  // sublet it" of a pool sized for its job, as RMM's pool_memory_resource's initial size. A job
  // whose memory fits pays no growth while it warms up — on a GPU each granule mapped is a driver
  // call of tens of µs, and a first pass growing from nothing spends most of its time there — and
  // the memory is held from the start, counted in reserved (and so in peak reserved / peak live).
  // Growing first, the front caches may fill what is reserved up to this size with large blocks,
  // as they may fill front_cache_reserve_headroom above peak live. 0 (the default): none; the pool
  // grows as requests come. Throws out_of_memory at construction if the upstream (or
  // max_reserved_bytes) refuses it, and std::invalid_argument if it is over
  // release_threshold_bytes (the pool would give it back at the first free). trim() gives it back
  // like any cached memory.
  std::size_t initial_reserve_bytes = 0;
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
  // memory mapped then, at the first step's footprint. What stays cached across a step's end
  // otherwise (slabs and cached blocks where the first step carved them, after the large blocks
  // around them) is in the way of the next step's large requests, which then grow (bert's trace
  // growing first: 48 granules more in its second pass, 1.306 -> 1.488 of peak live; with a
  // settle between passes none, 1.306). The next step pays its front-cache misses again until
  // the caches refill. Blocks freed on a stream whose work is still queued stay that stream's.
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
