#pragma once
// gpumem::pool — the stream-ordered caching pool. CUDA-free: it reaches memory only through an
// `upstream` and streams only through an `ordering`, so the same code runs on the simulated device
// and on a GPU.
#include <cstddef>
#include <limits>
#include <memory>
#include <vector>
#include <cstdint>

#include "gpumem/core.hpp"
#include "gpumem/errors.hpp"
#include "gpumem/graph_pool.hpp"
#include "gpumem/pool_stats.hpp"
#include "gpumem/resource.hpp"
#include "gpumem/upstream.hpp"

namespace gpumem {

// What a user of the pool decides. Each field has a row in pool_option_table.cpp, which gives it
// its CLI flag, its GPUMEM_CONFIG key and the Python keyword: add one there with a new field. How
// the pool gets there (when it grows, what it caches, when it moves memory) is its policy's own
// business and not an option.
struct pool_options {
  // Requests up to this size (at most 1 MiB) come from slabs carved into slots of their size
  // class. Lower it to serve mid-size requests from the arena instead of slabs.
  std::size_t small_max_bytes = std::size_t{1} << 20;
  // Cached bytes above this go back to the upstream at once (virtual upstreams unmap whole free
  // granules; plain ones free whole free segments). max() keeps everything, as cudaMallocAsync
  // with its release threshold at its maximum. Lower it when other users of the device need the
  // memory the pool caches.
  std::size_t release_threshold_bytes = std::numeric_limits<std::size_t>::max();
  // The pool never holds more than this from its upstream; past it a request throws
  // out_of_memory. Set it to share a device with other jobs.
  std::size_t max_reserved_bytes = std::numeric_limits<std::size_t>::max();
  // Freed memory is zeroed on the freeing stream before another user can get it (multi-tenant
  // services). Needs an upstream that can fill memory; the simulator has none.
  bool zero_on_free = false;
  // Bytes the pool reserves from its upstream when it is made (whole granules on a virtual
  // upstream, mapped; one segment on a plain one), as RMM's pool_memory_resource's initial size:
  // a job whose memory fits pays no growth while it warms up, and the memory is counted in reserved
  // from the start. 0 (the default): none; the pool grows as requests come. Throws out_of_memory at
  // construction if the upstream (or max_reserved_bytes) refuses it, and std::invalid_argument if
  // it is over release_threshold_bytes. trim() gives it back like any cached memory.
  std::size_t initial_reserve_bytes = 0;
};

namespace detail {
struct pool_tuning;  // gpumem/detail/pool_tuning.hpp: the policy's settings, internal
struct pool_config;  // pool_options and pool_tuning in one
}

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
  // Internal (tests, benchmarks, the doctor's comparisons): the policy's settings too. Needs
  // gpumem/detail/pool_tuning.hpp, which is not installed.
  pool(upstream& up, ordering& ord, const pool_options& opts, const detail::pool_tuning& tuning);
  // A detail::pool_config given as options would lose its tuning: pass it as both arguments above.
  pool(upstream& up, ordering& ord, const detail::pool_config& config) = delete;
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

  // CUDA graph capture (gpumem/graph_pool.hpp). begin_capture routes `s`'s allocations and frees
  // to graph pool `g` until end_capture(s); call it before the stream starts capturing and
  // end_capture after the capture ended (cudaStreamEndCapture), when events may be recorded on `s`
  // again. Misuse (an unknown or released pool, a stream already capturing, end without begin,
  // release while a stream captures into it) throws std::logic_error saying which.
  graph_pool_id create_graph_pool();
  void begin_capture(stream_ref s, graph_pool_id g);
  void end_capture(stream_ref s);
  // `s`: the stream after whose current work the graph's replays are done (its work is waited for
  // before memory goes back to the upstream).
  void release_graph_pool(graph_pool_id g, stream_ref s = {});
  graph_pool_stats graph_stats(graph_pool_id g) const;
  // The graph pool `s` captures into, 0 if none.
  graph_pool_id capture_of(stream_ref s) const;

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
