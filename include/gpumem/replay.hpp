#pragma once
// Replays a trace through a resource on the simulated device (or, with the CUDA layer, on the GPU)
// and measures it. The engine behind `gpumem replay`, `doctor` and `report`; its timed loop
// (replay_loop.hpp) is the one `gpumem bench` times every allocator with.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "gpumem/pool.hpp"
#include "gpumem/replay_verifier.hpp"
#include "gpumem/trace.hpp"

namespace gpumem {

struct replay_options {
  // "pool" (ours, on the simulated device's virtual memory), "pool-segments" (ours on plain
  // segments), "exact" (no caching: reserved = live, the floor). The CUDA layer adds GPU ones.
  std::string resource = "pool";
  std::size_t capacity_bytes = std::size_t{80} << 30;
  pool_options pool;
  // Internal (tests, the doctor's comparisons): the policy's settings for the pool targets
  // (gpumem/detail/pool_tuning.hpp, not installed); null: the library's. Must outlive the replay.
  const detail::pool_tuning* tuning = nullptr;
  // Simulated pool targets: the device finishes the work queued on its streams only once every
  // this many operations, as a GPU running behind the host (memory freed on a stream stays busy
  // until then); 0: at once, a device that keeps up.
  std::size_t device_lag_ops = 0;
  // Each row is issued on a thread of its own for each thread the trace names, in trace order,
  // one row at a time: a pool keeps a front cache per thread, so a job whose requests come from
  // several threads (PyTorch's backward pass runs on one of its own) caches differently replayed
  // on one. For memory figures: the time per op is then mostly the threads' handovers.
  bool recorded_threads = false;
  std::size_t timeline_points = 0;  // > 0: keep about this many (downsampled) points of the timeline
  bool segment_map_at_peak = false; // keep the pool's block map at the moment of peak reserved
  // Replays the trace this many times back to back on the same resource (a soak).
  std::size_t passes = 1;
  // Between passes, after what a pass left live is freed: pool::settle, as a job would call it
  // where each step ends (replay_target::settle; targets without a pool ignore it).
  bool settle_between_passes = false;
  // > 0: replaces `passes` with as many passes as it takes to replay at least this many ops.
  std::uint64_t min_ops = 0;
  // Integrity checks (a soak's), on with check_integrity or verify_every > 0: every block handed
  // out is checked against all live blocks for overlap and for `integrity_alignment`; and every
  // `verify_every`-th allocation (0: none) is stamped with a pattern right after allocation and
  // checked just before its free (replay_verifier.hpp). Off by default: the plain replay measures
  // the allocator alone.
  bool check_integrity = false;
  std::size_t verify_every = 0;
  std::size_t integrity_alignment = 0;  // 0: what the target promises (replay_target::alignment)
  // Called now and then with rows done; for progress bars.
  std::function<void(std::uint64_t done, std::uint64_t total)> progress;
};

struct timeline_point {
  std::uint64_t op = 0;            // row index
  std::int64_t time_us = -1;       // the row's wall time, when the trace has one
  std::size_t live_bytes = 0;
  std::size_t reserved_bytes = 0;
};

// One pass of a soak, at its end (before what the trace left live is given back).
struct soak_pass {
  std::size_t pass = 0;                 // 0-based
  std::size_t reserved_at_end_bytes = 0;
  std::size_t peak_reserved_bytes = 0;  // the target's peak so far
  std::uint64_t integrity_mismatches = 0;  // so far
  // So far, from the target's pool_stats (zeros for targets without a pool): granules mapped plus
  // unmapped, and the upstream calls that did it — what the slow path cost up to this pass's end.
  std::uint64_t granules_moved = 0;
  std::uint64_t map_unmap_calls = 0;
  // The passes' time since the soak began: the replay loops alone (and, with integrity checks,
  // the waits for them at each pass end). Freeing what a pass left live, before the next pass, is
  // not counted: those frees are the soak's, not the trace's (`gpumem bench` times alike).
  double seconds = 0.0;
  // Of granules_moved, those the driver really mapped or unmapped (kept mappings: pool_stats).
  std::uint64_t driver_granules = 0;
};

struct replay_result {
  std::string trace;
  std::string resource;
  std::uint64_t ops = 0;
  std::size_t peak_live_bytes = 0;
  std::size_t peak_reserved_bytes = 0;
  std::size_t final_reserved_bytes = 0;
  double fragmentation = 0.0;       // peak reserved / peak live
  double ns_per_op = 0.0;           // host time per allocate/free: the passes' time (soak_pass::seconds) / ops
  std::uint64_t failed_allocs = 0;  // requests the resource could not serve
  std::uint64_t trace_failures = 0; // `allocate failure` rows in the trace itself
  pool_stats stats;                 // pool resources only
  std::vector<timeline_point> timeline;
  std::vector<block_info> segment_map_at_peak;
  std::uint64_t peak_op = 0;        // row at which peak reserved was reached
  std::size_t passes = 1;
  std::size_t reserved_after_first_pass_bytes = 0;  // with passes > 1: the soak's baseline
  double soak_growth = 0.0;          // with passes > 1: peak reserved after pass 1 / after pass 1 - 1
  std::size_t max_reserved_later_passes_bytes = 0;  // with passes > 1: highest peak reserved in passes 2..N
  // Every pass for up to 1000 passes; longer soaks keep every k-th and the last.
  std::vector<soak_pass> pass_log;

  // Integrity (replay_options.check_integrity).
  bool integrity_checked = false;
  std::size_t verify_every = 0;       // data check on 1 in this many allocations (0: none)
  std::uint64_t overlap_checks = 0;   // blocks checked against all live blocks
  std::uint64_t overlaps = 0;         // blocks that overlapped a live block
  std::uint64_t misaligned = 0;       // blocks not aligned to integrity_alignment
  std::uint64_t verified_blocks = 0;  // blocks stamped at allocation and checked at free
  std::uint64_t mismatched_words = 0; // words of verified blocks that had changed by their free
  std::vector<std::string> integrity_notes;  // the first few problems, described
  std::uint64_t integrity_mismatches() const noexcept { return overlaps + misaligned + mismatched_words; }

  // `n` events (granules mapped, calls made, ...) per 1000 replayed ops; 0 when nothing was replayed.
  double per_1000_ops(std::uint64_t n) const noexcept { return ops ? 1000.0 * double(n) / double(ops) : 0.0; }
};

// What replay drives. The core's targets run on the simulated device; other layers (the GPU) add
// theirs with register_replay_target.
struct replay_target {
  virtual ~replay_target() = default;
  virtual void* allocate(std::size_t bytes, stream_ref s) = 0;  // nullptr: could not
  virtual void deallocate(void* p, std::size_t bytes, stream_ref s) = 0;
  // Replays map each distinct trace Stream value to a stream of the target, once per stream, before
  // any clock starts.
  virtual stream_ref stream_for(std::uint64_t trace_stream) { return stream_ref{trace_stream}; }
  virtual std::size_t reserved() = 0;
  virtual std::size_t peak_reserved() = 0;
  // pool::settle on a pool target; nothing on others.
  virtual void settle() {}
  virtual pool_stats stats() { return {}; }
  virtual std::vector<block_info> blocks() { return {}; }
  // The alignment every block it hands out has.
  virtual std::size_t alignment() { return default_alignment; }
  // How a soak stamps and checks this target's blocks. The default, a shadow model, touches no
  // memory, so it suits any target; targets whose memory can be written override it.
  virtual std::unique_ptr<replay_verifier> make_verifier() { return make_shadow_verifier(); }
};
using replay_target_factory = std::function<std::unique_ptr<replay_target>(const replay_options&)>;
void register_replay_target(const std::string& name, replay_target_factory make);

// Throws std::invalid_argument for an unknown resource name.
replay_result replay(const trace& t, const replay_options& opts);

// The target `replay` would drive for opts.resource (tests wrap one to break it on purpose).
// Throws std::invalid_argument for an unknown resource name.
std::unique_ptr<replay_target> make_replay_target(const replay_options& opts);

// Names `replay` accepts, for help texts and errors.
std::vector<std::string> replay_resources();

// Smallest capacity, to the granule, on which the trace runs with no failed allocation.
std::size_t min_capacity(const trace& t, const replay_options& opts);

}  // namespace gpumem
