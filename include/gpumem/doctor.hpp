#pragma once
// gpumem doctor: reads an allocation trace the way one diagnoses a memory problem, and says what
// it sees. Each finding has an id, a severity, the figures that show it and what to do about it.
//
// Each finding carries what it costs the job: device bytes it wastes at the peak and job time it
// loses, as estimated below. Findings are sorted by that cost, the costliest first, and their
// severity comes from it alone (severity_for_cost, the one place the rule lives):
//   cost share = max(wasted bytes / the device's capacity (replay_options::capacity_bytes),
//                    lost seconds / the job's time (the trace's first-to-last-row time; a trace
//                    without times counts untimed_us_per_row per row; never under min_job_seconds,
//                    so a trace of a few µs does not turn estimates of a µs into alarms))
//   error at a share >= cost_error (10%), warning at >= cost_warning (1%), info below.
// A finding that makes the job fail (allocation failures, pinned memory over its cap) costs the
// whole job: share 1.
//
// Findings and their costs (figures in `doctor_thresholds`, defaults below):
//   small-object-churn    allocations under 4 KiB exist. Cost: time, small_pair_us for each and
//                         its free (a caching pool's host time; a raw cudaMalloc would cost more).
//   fragmentation         when a replay engine is given: the default pool's peak reserve against
//                         what any pool that maps whole granules must reserve: the peak of live
//                         bytes with each request rounded up to the alignment (256 B), rounded up
//                         to whole granules (2 MiB). Cost: bytes, the reserve above that bound.
//                         Under min_meaningful_granules granules of live memory the finding only
//                         says fragmentation is not meaningful at that size (cost 0).
//   slow-path-remapping   with the fragmentation replay, when the default pool moved memory:
//                         granules unmapped and mapped again elsewhere (first-time growth is not a
//                         move: each granule of the peak reserve was mapped once when it was
//                         made). Cost: time, the driver calls of the moves (27.5 µs per granule
//                         mapped with its access set, 16 µs per granule unmapped, on an H200;
//                         granules moved back where they were still mapped cost none). Quotes the
//                         same trace with idle_budget 0.05 and with an initial reserve sized to what
//                         the pool growing first reaches in two passes. No finding without moves.
//   cross-stream-free     blocks freed on another stream than the one that allocated them. Cost:
//                         bytes, those blocks live at peak live (each may sit reserved until an
//                         event on the freeing stream completes).
//   unaligned-sizes       sizes that are not a multiple of 256 B. Cost: bytes, the rounding of
//                         what is live at peak live.
//   leak                  allocations never freed by the end of the trace. Cost: bytes, the leaked
//                         bytes when they accumulate (>= 8 leaks made across >= 50% of the rows);
//                         none otherwise (a trace cut mid-job leaves buffers live legitimately).
//   alloc-failure         `allocate failure` rows. Cost: the whole job.
//   capture-frees-graph-memory  blocks allocated before a CUDA graph capture (trace rows
//                         capture_begin / capture_end on a stream) and freed on the capturing stream
//                         during it: the graph's replays still use them after the allocator got
//                         them back. Cost: the whole job (wrong results).
//   peak-to-average       when the trace allocates: peak live vs mean live (time-weighted when the
//                         trace has times). Cost: none to the job (it needs its peak); the idle
//                         share says what another job could use.
//   hot-allocation-sizes  when the trace allocates: the most frequent sizes. Cost: none.
//   pinned-memory         when a pinned host trace is given (`doctor_options::pinned`): its peak
//                         pinned bytes against the cap pinned_host_resource enforces (default 20% of
//                         this machine's RAM), and re-pins (allocations of exactly the size of a
//                         pinned block freed earlier, each free matched at most once). Cost: the
//                         whole job over the cap or with refused requests; else time, repin_us per
//                         re-pin (cudaMallocHost + cudaFreeHost, which synchronize the device)
//                         against the pinned trace's time, and at least cost_warning at >= 80% of
//                         the cap (the next larger batch fails).
// A clean trace (one stream, aligned sizes >= 4 KiB, everything freed, no failures) gives no
// finding above info.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "gpumem/replay.hpp"
#include "gpumem/trace.hpp"

namespace gpumem {

enum class severity : std::uint8_t { info, warning, error };
const char* to_string(severity s) noexcept;
struct doctor_thresholds;
// The severity of a finding that costs `share` of the job (see the top of this file).
severity severity_for_cost(double share, const doctor_thresholds& th) noexcept;

// One number that shows a finding. The key is snake_case with its unit in the name
// (`leaked_bytes`, `small_allocations_per_second`); a `_share` is a fraction in [0, 1].
struct figure {
  std::string key;
  double value = 0.0;
  bool integral = false;  // a count or a byte size: print without a fraction
};

struct finding {
  std::string id;          // e.g. "leak"
  severity level = severity::info;
  std::string summary;     // one sentence: what was seen, with its main figures
  std::vector<figure> figures;
  std::string advice;      // what to do about it
  // What it costs the job (see the top of this file); `level` follows from cost_share.
  double cost_bytes = 0.0;    // device bytes wasted at the peak
  double cost_seconds = 0.0;  // job time lost
  double cost_share = 0.0;    // of the device or of the job's time, whichever is larger; 1: the job fails

  // The figure named `key`; throws std::out_of_range when absent (tests and tools ask by name).
  double at(const std::string& key) const;
};

struct doctor_thresholds {
  double cost_warning = 0.01;                    // cost share at which a finding is a warning
  double cost_error = 0.10;                      // and an error
  double untimed_us_per_row = 10.0;              // job time a row of a trace without times stands for
  double min_job_seconds = 0.001;                // the job's time is taken as at least this
  std::uint64_t small_bytes = 4096;              // "small" is strictly below this
  double small_pair_us = 0.5;                    // a small allocation and its free, in a caching pool
  std::uint64_t granule_bytes = std::uint64_t{2} << 20;  // what a granule-based pool maps at a time
  std::uint64_t min_meaningful_granules = 4;     // below: fragmentation is not judged
  double map_us_per_granule = 27.5;              // cuMemMap + cuMemSetAccess, one 2 MiB granule, H200
  double unmap_us_per_granule = 16.0;            // cuMemUnmap, one 2 MiB granule, H200
  double remap_alternative_idle_budget = 0.05;   // the trade the finding quotes
  std::uint64_t alignment_bytes = 256;
  std::uint64_t leak_count_warning = 8;          // leaks that accumulate: at least this many
  double leak_span_warning = 0.50;               // made across this share of the rows
  std::size_t hot_sizes = 5;                     // how many sizes hot-allocation-sizes lists
  double pinned_cap_share_warning = 0.80;        // peak pinned / cap: at least a warning
  double repin_us = 1000.0;                      // cudaMallocHost + cudaFreeHost of one re-pin
};

// The replay engine the fragmentation finding uses (gpumem::replay in the tool).
using replay_fn = std::function<replay_result(const trace&, const replay_options&)>;

struct doctor_options {
  doctor_thresholds thresholds;
  // Empty: the fragmentation finding is not measured (the report says so in `skipped`).
  replay_fn replayer;
  // Base options for the replays; the doctor sets `resource` to "pool", and — when the default
  // pool moved granules — replays "pool" once more with thresholds.remap_alternative_idle_budget
  // and twice over two passes for the initial reserve (growing first, then on the reserve that
  // gave). capacity_bytes is the device the cost of wasted bytes is judged against.
  replay_options replay;
  // Pinned host allocations of the same job, for the pinned-memory finding; not owned, read during
  // diagnose() only. Null: the finding is not measured (the report says so in `skipped`).
  const trace* pinned = nullptr;
  // The cap the pinned trace is judged against; 0: default_pinned_cap_bytes() (20% of this
  // machine's RAM, the cap pinned_host_resource starts with).
  std::uint64_t pinned_cap_bytes = 0;
};

struct doctor_report {
  std::string trace;
  std::uint64_t rows = 0;
  std::uint64_t allocations = 0;
  std::uint64_t frees = 0;
  std::uint64_t allocate_failures = 0;
  double duration_seconds = 0.0;       // first to last row's time; 0 when the trace has no times
  std::uint64_t peak_live_bytes = 0;
  std::uint64_t device_bytes = 0;      // what wasted bytes are a share of (replay capacity)
  double job_seconds = 0.0;            // what lost time is a share of (at least min_job_seconds)
  bool job_seconds_estimated = false;  // the trace has no times: rows x untimed_us_per_row
  std::string pinned_trace;            // the pinned trace's name; empty when none was given
  std::vector<finding> findings;       // costliest first (ties: in the order of the list above)
  std::vector<std::string> skipped;    // findings not measured, each with the reason

  severity worst() const noexcept;     // info when there are no findings
  const finding* find(const std::string& id) const noexcept;
};

// Runs every check on a trace that read_trace validated (live pointers consistent).
doctor_report diagnose(const trace& t, const doctor_options& opts = {});

}  // namespace gpumem
