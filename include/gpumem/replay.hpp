#pragma once
// Replays a trace through a resource on the simulated device (or, with the CUDA layer, on the GPU)
// and measures it. The engine behind `gpumem replay`, `doctor`, `report` and `bench`.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "gpumem/pool.hpp"
#include "gpumem/trace.hpp"

namespace gpumem {

struct replay_options {
  // "pool" (ours, on the simulated device's virtual memory), "pool-segments" (ours on plain
  // segments), "exact" (no caching: reserved = live, the floor). The CUDA layer adds GPU ones.
  std::string resource = "pool";
  std::size_t capacity_bytes = std::size_t{80} << 30;
  pool_options pool;
  std::size_t timeline_points = 0;  // > 0: keep about this many (downsampled) points of the timeline
  bool segment_map_at_peak = false; // keep the pool's block map at the moment of peak reserved
  // Replays the trace this many times back to back on the same resource (a soak).
  std::size_t passes = 1;
  // Called now and then with rows done; for progress bars.
  std::function<void(std::uint64_t done, std::uint64_t total)> progress;
};

struct timeline_point {
  std::uint64_t op = 0;            // row index
  std::int64_t time_us = -1;       // the row's wall time, when the trace has one
  std::size_t live_bytes = 0;
  std::size_t reserved_bytes = 0;
};

struct replay_result {
  std::string trace;
  std::string resource;
  std::uint64_t ops = 0;
  std::size_t peak_live_bytes = 0;
  std::size_t peak_reserved_bytes = 0;
  std::size_t final_reserved_bytes = 0;
  double fragmentation = 0.0;       // peak reserved / peak live
  double ns_per_op = 0.0;           // host time per allocate/free, replay loop only
  std::uint64_t failed_allocs = 0;  // requests the resource could not serve
  std::uint64_t trace_failures = 0; // `allocate failure` rows in the trace itself
  pool_stats stats;                 // pool resources only
  std::vector<timeline_point> timeline;
  std::vector<block_info> segment_map_at_peak;
  std::uint64_t peak_op = 0;        // row at which peak reserved was reached
  std::size_t passes = 1;
  std::size_t reserved_after_first_pass_bytes = 0;  // with passes > 1: the soak's baseline
  double soak_growth = 0.0;          // with passes > 1: peak reserved after pass 1 / after pass 1 - 1
};

// What replay drives. The core's targets run on the simulated device; other layers (the GPU) add
// theirs with register_replay_target.
struct replay_target {
  virtual ~replay_target() = default;
  virtual void* allocate(std::size_t bytes, stream_ref s) = 0;  // nullptr: could not
  virtual void deallocate(void* p, std::size_t bytes, stream_ref s) = 0;
  // Replays map each distinct trace Stream value to a stream of the target.
  virtual stream_ref stream_for(std::uint64_t trace_stream) { return trace_stream; }
  virtual std::size_t reserved() = 0;
  virtual std::size_t peak_reserved() = 0;
  virtual pool_stats stats() { return {}; }
  virtual std::vector<block_info> blocks() { return {}; }
};
using replay_target_factory = std::function<std::unique_ptr<replay_target>(const replay_options&)>;
void register_replay_target(const std::string& name, replay_target_factory make);

// A trace's pointers resolved to dense slots before any clock starts, so a replay loop indexes a
// vector instead of hashing addresses: slot_of[i] is row i's slot (no_slot for rows without one: an
// `allocate failure`, or a free of a pointer the trace never allocated).
struct trace_slots {
  static constexpr std::uint32_t no_slot = UINT32_MAX;
  std::vector<std::uint32_t> slot_of;
  std::uint32_t count = 0;  // slots needed at once: the most blocks live together
};
trace_slots resolve_slots(const trace& t);

// Throws std::invalid_argument for an unknown resource name.
replay_result replay(const trace& t, const replay_options& opts);

// Names `replay` accepts, for help texts and errors.
std::vector<std::string> replay_resources();

// Smallest capacity, to the granule, on which the trace runs with no failed allocation.
std::size_t min_capacity(const trace& t, const replay_options& opts);

}  // namespace gpumem
