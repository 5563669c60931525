#pragma once
// gpumem doctor: reads an allocation trace the way one diagnoses a memory problem, and says what
// it sees. Each finding has an id, a severity, the figures that show it and what to do about it.
//
// Findings and when they are raised (thresholds in `doctor_thresholds`, defaults below):
//   small-object-churn    allocations under 4 KiB exist. warning when they are >= 50% of all
//                         allocations AND come at >= 5,000 per second of trace wall time (or the
//                         trace has no times); info otherwise. A caching pool serves them cheaply;
//                         a raw cudaMalloc per tensor would not.
//   fragmentation         always, when a replay engine is given: the trace replayed through the
//                         default pool and through `exact` (reserved = live, the floor).
//                         warning at peak reserved / peak live >= 1.20, error at >= 1.50.
//   slow-path-remapping   with the fragmentation replays: the granules the default pool maps and
//                         unmaps per 1000 ops to stay that tight, what those driver calls alone
//                         would cost on an H200 (27.5 µs per granule mapped with its access set,
//                         16 µs per granule unmapped: bench/RESULTS.md, session 3), and the same
//                         trace replayed with idle_budget 0.05 beside it; and, when the pool remaps
//                         at all, an initial reserve (pool_options::initial_reserve_bytes) sized to
//                         what the pool growing first reaches in two passes, with the granules the
//                         default pool still remaps in the second of two passes on it. warning when
//                         the estimate reaches 1 µs per op (a cost every tensor pays); info otherwise.
//   cross-stream-free     blocks freed on another stream than the one that allocated them.
//                         warning when >= 1% of frees; info below.
//   unaligned-sizes       sizes that are not a multiple of 256 B. warning when >= 50% of
//                         allocations AND the rounding they cost at peak live is >= 0.5% of peak
//                         live; info otherwise (sub-256 B objects are always "unaligned").
//   leak                  allocations never freed by the end of the trace. warning when >= 8 of
//                         them were made across >= 50% of the trace's rows (a steady accumulation,
//                         not buffers set up once); info otherwise (a trace cut mid-job leaves some
//                         memory live legitimately).
//   alloc-failure         `allocate failure` rows. error when any.
//   peak-to-average       always, when the trace allocates: peak live vs mean live (time-weighted
//                         when the trace has times, else per row). warning at >= 4: the job holds
//                         its peak briefly, so its memory could be shared with another job.
//   hot-allocation-sizes  always, when the trace allocates: the most frequent sizes with their
//                         share of all allocations. info.
//   pinned-memory         when a pinned host trace is given (`doctor_options::pinned`: the same
//                         CSV, as trace_adaptor writes it around pinned_host_resource): its peak
//                         pinned bytes against the cap pinned_host_resource enforces (default 20% of
//                         this machine's RAM). Pinned pages are page-locked RAM the OS cannot swap:
//                         a host that pins too much swaps or OOM-kills. error when peak pinned > cap
//                         (pinned_host_resource would have refused) or the trace has `allocate
//                         failure` rows (it did refuse). warning when peak >= 80% of the cap, OR the
//                         allocations are re-pins: >= 50% of pinned allocations (and >= 8 of them)
//                         have exactly the size of a pinned block freed earlier (each free matched
//                         by at most one later allocation): cudaMallocHost/cudaFreeHost cost about
//                         a millisecond each and synchronize the device, so a loop that pins per
//                         batch should keep one pinned staging buffer instead. info otherwise.
// A clean trace (one stream, aligned sizes >= 4 KiB, everything freed, a steady footprint, no
// failures) gives no finding above info.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "gpumem/replay.hpp"
#include "gpumem/trace.hpp"

namespace gpumem {

enum class severity : std::uint8_t { info, warning, error };
const char* to_string(severity s) noexcept;

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

  // The figure named `key`; throws std::out_of_range when absent (tests and tools ask by name).
  double at(const std::string& key) const;
};

struct doctor_thresholds {
  std::uint64_t small_bytes = 4096;              // "small" is strictly below this
  double small_share_warning = 0.50;
  double small_per_second_warning = 5000.0;
  double fragmentation_warning = 1.20;
  double fragmentation_error = 1.50;
  double map_us_per_granule = 27.5;              // cuMemMap + cuMemSetAccess, one 2 MiB granule, H200
  double unmap_us_per_granule = 16.0;            // cuMemUnmap, one 2 MiB granule, H200
  double remap_warning_us_per_op = 1.0;
  double remap_alternative_idle_budget = 0.05;   // the trade the finding quotes
  double cross_stream_share_warning = 0.01;
  std::uint64_t alignment_bytes = 256;
  double unaligned_share_warning = 0.50;
  double unaligned_peak_cost_warning = 0.005;    // rounding bytes at peak / peak live
  std::uint64_t leak_count_warning = 8;
  double leak_span_warning = 0.50;               // rows between first and last leak / all rows
  double peak_to_average_warning = 4.0;
  std::size_t hot_sizes = 5;                     // how many sizes hot-allocation-sizes lists
  double pinned_cap_share_warning = 0.80;        // peak pinned / cap
  double pinned_repin_share_warning = 0.50;      // re-pinned allocations / pinned allocations
  std::uint64_t pinned_repin_count_warning = 8;  // and at least this many re-pins
};

// The replay engine the fragmentation finding uses (gpumem::replay in the tool).
using replay_fn = std::function<replay_result(const trace&, const replay_options&)>;

struct doctor_options {
  doctor_thresholds thresholds;
  // Empty: the fragmentation finding is not measured (the report says so in `skipped`).
  replay_fn replayer;
  // Base options for the replays; the doctor sets `resource` to "pool" and then to "exact", and
  // replays "pool" once more with thresholds.remap_alternative_idle_budget, and — when the default
  // pool remapped granules — twice over two passes for the initial reserve (growing first, then
  // on the reserve that gave).
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
  std::string pinned_trace;            // the pinned trace's name; empty when none was given
  std::vector<finding> findings;       // in the order of the list above
  std::vector<std::string> skipped;    // findings not measured, each with the reason

  severity worst() const noexcept;     // info when there are no findings
  const finding* find(const std::string& id) const noexcept;
};

// Runs every check on a trace that read_trace validated (live pointers consistent).
doctor_report diagnose(const trace& t, const doctor_options& opts = {});

}  // namespace gpumem
