// Judges a trace's profile against the thresholds in doctor.hpp and words the findings. Each
// finding is built by one function, in the order the header lists them, and says what it costs
// the job; diagnose() turns the costs into severities and sorts by them. pinned-memory, which
// judges a second trace, lives in doctor_pinned.cpp.
#include "gpumem/doctor.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "doctor_capture.hpp"
#include "gpumem/detail/pool_tuning.hpp"

#include "doctor_pinned.hpp"
#include "doctor_words.hpp"
#include "trace_profile.hpp"

namespace gpumem {

const char* to_string(severity s) noexcept {
  switch (s) {
    case severity::info: return "info";
    case severity::warning: return "warning";
    case severity::error: return "error";
  }
  return "unknown";
}

severity severity_for_cost(double share, const doctor_thresholds& th) noexcept {
  return share >= th.cost_error ? severity::error : share >= th.cost_warning ? severity::warning : severity::info;
}

double finding::at(const std::string& key) const {
  for (const auto& f : figures)
    if (f.key == key) return f.value;
  throw std::out_of_range("finding `" + id + "` has no figure `" + key + "`");
}

severity doctor_report::worst() const noexcept {
  severity w = severity::info;
  for (const auto& f : findings) w = std::max(w, f.level);
  return w;
}

const finding* doctor_report::find(const std::string& id) const noexcept {
  for (const auto& f : findings)
    if (f.id == id) return &f;
  return nullptr;
}

namespace {

using detail::bytes_text;
using detail::count;
using detail::ratio;
using detail::share;
using detail::trace_profile;

void small_object_churn(const trace_profile& p, const doctor_thresholds& th, doctor_report& out) {
  if (p.small_allocations == 0) return;
  finding f;
  f.id = "small-object-churn";
  const double s = share(p.small_allocations, p.allocations);
  const double per_1000 = 1000.0 * share(p.small_allocations, p.rows);
  f.figures = {count("small_allocations", p.small_allocations), ratio("small_allocation_share", s),
               ratio("small_allocations_per_1000_ops", per_1000),
               count("small_threshold_bytes", th.small_bytes)};
  if (p.timed && p.duration_seconds > 0.0) {
    const double per_second = static_cast<double>(p.small_allocations) / p.duration_seconds;
    f.figures.push_back(ratio("small_allocations_per_second", per_second));
    f.summary = fmt::format("{} allocations under {} ({:.1f}% of allocations), {:.0f} per second, "
                            "{:.0f} per 1000 ops", p.small_allocations, bytes_text(double(th.small_bytes)),
                            100 * s, per_second, per_1000);
  } else {
    f.summary = fmt::format("{} allocations under {} ({:.1f}% of allocations), {:.0f} per 1000 ops",
                            p.small_allocations, bytes_text(double(th.small_bytes)), 100 * s, per_1000);
  }
  f.cost_seconds = static_cast<double>(p.small_allocations) * th.small_pair_us * 1e-6;
  f.advice = "Tiny requests cost allocator time, not memory: serve them from a caching pool's slabs "
             "(never a cudaMalloc each), keep scalars on the host, or fuse many small tensors into one "
             "buffer.";
  out.findings.push_back(std::move(f));
}

// Both need the replays; says why each is skipped when they cannot run.
bool replayable(const trace_profile& p, const doctor_options& opts, doctor_report& out) {
  const char* why = !opts.replayer ? "no replay engine was given" : p.allocations == 0 ? "the trace allocates nothing" : nullptr;
  if (!why) return true;
  out.skipped.push_back(fmt::format("fragmentation: {}", why));
  out.skipped.push_back(fmt::format("slow-path-remapping: {}", why));
  return false;
}

// What the pool moved, as opposed to what it grew: each granule of the peak reserve was mapped
// once when it was made (growth); maps beyond those, and every unmap, are moves.
struct moves {
  std::uint64_t granules = 0;       // unmapped and mapped again elsewhere (the larger of the two counts)
  std::uint64_t driver_maps = 0;    // of the maps, those the driver made (not back onto a kept mapping)
  std::uint64_t driver_unmaps = 0;
  double driver_seconds = 0.0;      // what those driver calls cost
};

moves moves_of(const replay_result& r, const doctor_thresholds& th) {
  const std::uint64_t grown = r.peak_reserved_bytes / th.granule_bytes;
  const auto beyond = [grown](std::uint64_t maps) { return maps > grown ? maps - grown : 0; };
  moves m;
  m.granules = std::max(beyond(r.stats.maps), r.stats.unmaps);
  m.driver_maps = beyond(r.stats.driver_maps);
  m.driver_unmaps = r.stats.driver_unmaps;
  m.driver_seconds = (static_cast<double>(m.driver_maps) * th.map_us_per_granule +
                      static_cast<double>(m.driver_unmaps) * th.unmap_us_per_granule) * 1e-6;
  return m;
}

// Granules the pool moved in the second of two passes, per 1000 ops of that pass: what remaps
// once the job's first step has set the pool up (0 when the replay kept no pass log).
double second_pass_remapped_per_1000_ops(const replay_result& r) {
  if (r.pass_log.size() < 2 || r.ops == 0) return 0.0;  // a pass log of two entries: passes >= 2
  const double pass_ops = static_cast<double>(r.ops) / static_cast<double>(r.passes);
  const double moved = static_cast<double>(r.pass_log[1].granules_moved - r.pass_log[0].granules_moved);
  return 1000.0 * moved / pass_ops;
}

// The other cure for remapping: a pool sized for the job at start-up (pool_options::
// initial_reserve_bytes), mapped once. Its size starts at what the pool growing first reaches over
// two passes — the footprint at which a repeating job stops asking the driver for memory — and the
// figures are the default pool replayed twice on that reserve. The default pool places blocks
// its own way, so that footprint may fall a little short for it: while its second pass still
// remaps, the reserve grows by a sixteenth of the start, at most reserve_search_steps times. A
// smaller reserve is no sure saving (bench/RESULTS.md). False, with the reason in `skipped`, when
// it cannot be replayed.
constexpr int reserve_search_steps = 4;
bool reserve_alternative(const trace& t, const doctor_options& opts, finding& f, std::string& sentence,
                         doctor_report& out) {
  replay_options ro = opts.replay;
  ro.resource = "pool";
  ro.passes = 2;
  ro.min_ops = 0;
  try {
    detail::pool_tuning growing = opts.replay.tuning ? *opts.replay.tuning : detail::pool_tuning{};
    growing.grow_before_reclaim = true;
    ro.tuning = &growing;
    const std::size_t grown = opts.replayer(t, ro).peak_reserved_bytes;
    ro.tuning = opts.replay.tuning;
    std::size_t reserve = grown;
    int steps = 0;
    replay_result reserved;
    double per_1000 = 0;
    for (;; ++steps, reserve += grown / 16) {
      ro.pool.initial_reserve_bytes = reserve;
      reserved = opts.replayer(t, ro);
      per_1000 = second_pass_remapped_per_1000_ops(reserved);
      if (per_1000 == 0 || steps == reserve_search_steps) break;
    }
    f.figures.push_back(count("reserve_bytes", reserve));
    f.figures.push_back(count("reserve_growing_first_bytes", grown));
    f.figures.push_back(ratio("reserve_second_pass_granules_remapped_per_1000_ops", per_1000));
    f.figures.push_back(ratio("reserve_fragmentation", reserved.fragmentation));
    std::string how = "what the pool growing first reaches in two passes";
    if (steps > 0) how += fmt::format(", {}, and {}/16 more", bytes_text(static_cast<double>(grown)), steps);
    sentence = fmt::format("; with an initial reserve of {} ({}), {:.1f} per 1000 ops in a second pass at {:.3f}x",
                           bytes_text(static_cast<double>(reserve)), how, per_1000, reserved.fragmentation);
    return true;
  } catch (const std::exception& e) {
    out.skipped.push_back(fmt::format("slow-path-remapping's initial reserve: {}", e.what()));
    return false;
  }
}

// The default pool stays tight by moving physical granules to where requests land; on a GPU each
// granule mapped or unmapped is a driver call of tens of µs. No finding when it moved none.
void slow_path_remapping(const trace& t, const doctor_options& opts, const replay_result& pool,
                         doctor_report& out) {
  const auto& th = opts.thresholds;
  const moves m = moves_of(pool, th);
  if (m.granules == 0) return;
  replay_options ro = opts.replay;
  ro.resource = "pool";
  detail::pool_tuning budget = opts.replay.tuning ? *opts.replay.tuning : detail::pool_tuning{};
  budget.idle_budget = th.remap_alternative_idle_budget;
  ro.tuning = &budget;
  const replay_result alt = opts.replayer(t, ro);
  const moves am = moves_of(alt, th);
  const double per_1000 = pool.per_1000_ops(m.granules), alt_per_1000 = alt.per_1000_ops(am.granules);
  finding f;
  f.id = "slow-path-remapping";
  f.figures = {count("granules_moved", m.granules), ratio("granules_moved_per_1000_ops", per_1000),
               count("driver_maps_of_moves", m.driver_maps), count("driver_unmaps_of_moves", m.driver_unmaps),
               count("stream_ordered_moves", pool.stats.stream_ordered_moves),
               ratio("estimated_h200_driver_seconds", m.driver_seconds),
               ratio("alternative_idle_budget", th.remap_alternative_idle_budget),
               ratio("alternative_granules_moved_per_1000_ops", alt_per_1000),
               ratio("alternative_estimated_h200_driver_seconds", am.driver_seconds),
               ratio("alternative_fragmentation", alt.fragmentation)};
  f.cost_seconds = m.driver_seconds;
  f.summary = fmt::format("the default pool moves {} granules ({:.1f} per 1000 ops: unmapped and mapped again "
                          "elsewhere, growth aside); their driver calls ({} maps, {} unmaps) would take {:.1f} ms "
                          "on an H200; with idle_budget {:g}, {:.1f} per 1000 ops ({:.1f} ms) at {:.3f}x peak "
                          "reserved / peak live",
                          m.granules, per_1000, m.driver_maps, m.driver_unmaps, m.driver_seconds * 1e3,
                          th.remap_alternative_idle_budget, alt_per_1000, am.driver_seconds * 1e3, alt.fragmentation);
  f.advice = "Each granule the pool moves is a CUDA driver call of tens of µs. The idle-budget figures say "
             "what keeping that fraction of live memory mapped instead of moving it would trade (the pool's "
             "policy, not an option).";
  std::string sentence;
  if (reserve_alternative(t, opts, f, sentence, out)) {
    f.summary += sentence;
    f.advice += " If the job's shapes keep changing and its time matters more than the last percents of "
                "memory, size the pool for the job once, at start-up: pool_options::initial_reserve_bytes "
                "(`--initial-reserve`; `initial_reserve` in the PyTorch adaptor's config) maps that memory "
                "when the pool is made, free for every stream, so the job's steps find it mapped.";
  }
  out.findings.push_back(std::move(f));
}

// The fragmentation finding, then slow-path-remapping from the same default-pool replay. The bound
// is what any pool that maps whole granules and aligns its blocks must reserve: the peak of the
// aligned live bytes, rounded up to whole granules (the exact replay's floor, plus those two
// roundings); only the reserve above it is the pool's to save.
void fragmentation(const trace& t, const trace_profile& p, const doctor_options& opts,
                   doctor_report& out) {
  if (!replayable(p, opts, out)) return;
  const auto& th = opts.thresholds;
  replay_options ro = opts.replay;
  ro.resource = "pool";
  const replay_result pool = opts.replayer(t, ro);
  const std::uint64_t g = th.granule_bytes;
  const std::uint64_t bound = (p.peak_aligned_live_bytes + g - 1) / g * g;
  const double reserved = static_cast<double>(pool.peak_reserved_bytes);
  const double over = bound ? reserved / static_cast<double>(bound) : 1.0;
  const double wasted = std::max(0.0, reserved - static_cast<double>(bound));
  finding f;
  f.id = "fragmentation";
  f.figures = {count("pool_peak_reserved_bytes", pool.peak_reserved_bytes),
               count("peak_live_bytes", p.peak_live_bytes),
               count("peak_aligned_live_bytes", p.peak_aligned_live_bytes),
               count("granule_bytes", g),
               count("bound_bytes", bound),
               ratio("reserved_over_bound", over),
               count("wasted_bytes", static_cast<std::uint64_t>(wasted)),
               ratio("fragmentation", pool.fragmentation),
               count("pool_failed_allocations", pool.failed_allocs)};
  const std::uint64_t floor_granules = std::max<std::uint64_t>(1, th.min_meaningful_granules);
  if (p.peak_aligned_live_bytes < floor_granules * g) {
    f.summary = fmt::format("live memory under {} granules: fragmentation is not meaningful at this size "
                            "(peak live {}; the default pool reserves {}, {} granule{})",
                            floor_granules, bytes_text(double(p.peak_live_bytes)), bytes_text(reserved),
                            pool.peak_reserved_bytes / g, pool.peak_reserved_bytes / g == 1 ? "" : "s");
    f.advice = "Nothing to do: a pool maps memory in whole granules, so a job this small always holds a "
               "few of them.";
  } else {
    f.cost_bytes = wasted;
    f.summary = fmt::format("the default pool peaks at {} reserved; a pool of {} granules needs at least {} "
                            "(peak live {}, each request rounded up to {} B, rounded up to whole granules): "
                            "{:.3f}x that bound, {} above it",
                            bytes_text(reserved), bytes_text(double(g)), bytes_text(double(bound)),
                            bytes_text(double(p.peak_live_bytes)), th.alignment_bytes, over, bytes_text(wasted));
    f.advice = "Reserved memory above the bound is held in free blocks no request of the moment fits. Make "
               "the sizes recur: pad varying shapes (sequence lengths, batch sizes) to a few buckets so a freed "
               "block fits the next request; and allocate long-lived buffers (weights, optimizer state, "
               "caches) first, at start-up, so they do not pin granules among short-lived ones.";
  }
  if (pool.failed_allocs > 0)
    f.summary += fmt::format("; {} requests failed in the replay", pool.failed_allocs);
  out.findings.push_back(std::move(f));
  slow_path_remapping(t, opts, pool, out);
}

void cross_stream_free(const trace_profile& p, doctor_report& out) {
  if (p.cross_stream_frees == 0) return;
  finding f;
  f.id = "cross-stream-free";
  const double s = share(p.cross_stream_frees, p.frees);
  f.figures = {count("cross_stream_frees", p.cross_stream_frees), ratio("cross_stream_free_share", s),
               count("cross_stream_bytes", p.cross_stream_bytes),
               count("cross_stream_bytes_at_peak", p.cross_stream_bytes_at_peak)};
  f.cost_bytes = static_cast<double>(p.cross_stream_bytes_at_peak);
  f.summary = fmt::format("{} blocks ({:.1f}% of frees, {} in all) freed on a stream other than "
                          "their allocating one; {} of them live at peak live", p.cross_stream_frees, 100 * s,
                          bytes_text(double(p.cross_stream_bytes)), bytes_text(double(p.cross_stream_bytes_at_peak)));
  f.advice = "A block freed on another stream is reusable only after an event on that stream "
             "completes, so it sits idle meanwhile; and without that event (or PyTorch's "
             "record_stream) the reuse races the other stream's work. Free on the stream that last "
             "used the block, or allocate it on that stream.";
  out.findings.push_back(std::move(f));
}

void unaligned_sizes(const trace_profile& p, const doctor_thresholds& th, doctor_report& out) {
  if (p.unaligned_allocations == 0) return;
  finding f;
  f.id = "unaligned-sizes";
  const double s = share(p.unaligned_allocations, p.allocations);
  const double cost = share(p.rounding_bytes_at_peak, p.peak_live_bytes);
  f.figures = {count("unaligned_allocations", p.unaligned_allocations), ratio("unaligned_share", s),
               count("alignment_bytes", th.alignment_bytes),
               count("rounding_bytes_total", p.rounding_bytes_total),
               count("rounding_bytes_at_peak", p.rounding_bytes_at_peak),
               ratio("rounding_share_of_peak_live", cost)};
  f.cost_bytes = static_cast<double>(p.rounding_bytes_at_peak);
  f.summary = fmt::format("{:.1f}% of allocations are not a multiple of {} B; rounding them costs {} "
                          "at peak live ({:.2f}% of it)", 100 * s, th.alignment_bytes,
                          bytes_text(double(p.rounding_bytes_at_peak)), 100 * cost);
  f.advice = "Every allocator rounds up to its alignment (256 B for cudaMalloc), so odd sizes waste "
             "the remainder. It matters only for many small live objects: pad them to the alignment "
             "and pack several into one buffer.";
  out.findings.push_back(std::move(f));
}

void leak(const trace_profile& p, const doctor_thresholds& th, doctor_report& out) {
  if (p.leaked_allocations == 0) return;
  finding f;
  f.id = "leak";
  f.figures = {count("leaked_allocations", p.leaked_allocations), count("leaked_bytes", p.leaked_bytes),
               count("largest_leak_bytes", p.largest_leak_bytes),
               ratio("leaked_share_of_peak_live", share(p.leaked_bytes, p.peak_live_bytes)),
               count("first_leak_line", p.first_leak_line), count("last_leak_line", p.last_leak_line),
               ratio("leak_span_share", p.leak_span_share)};
  const bool accumulating =
      p.leaked_allocations >= th.leak_count_warning && p.leak_span_share >= th.leak_span_warning;
  f.cost_bytes = accumulating ? static_cast<double>(p.leaked_bytes) : 0.0;
  f.summary = fmt::format("{} allocations ({} in all, the largest {}) are never freed; made between "
                          "lines {} and {}", p.leaked_allocations, bytes_text(double(p.leaked_bytes)),
                          bytes_text(double(p.largest_leak_bytes)), p.first_leak_line, p.last_leak_line);
  f.advice = accumulating
                 ? "Memory that is allocated all along the job and never freed grows until it runs out: "
                   "look for caches, lists of tensors or graphs kept alive across steps (the lines "
                   "above show where the first and last were made)."
                 : "A trace cut mid-job leaves some buffers live legitimately (outputs, caches set up "
                   "once); check that these are meant to outlive the trace.";
  out.findings.push_back(std::move(f));
}

void alloc_failure(const trace_profile& p, doctor_report& out) {
  if (p.failures == 0) return;
  finding f;
  f.id = "alloc-failure";
  f.cost_share = 1.0;  // the job fails
  f.figures = {count("failed_requests", p.failures),
               count("largest_failed_request_bytes", p.largest_failed_bytes),
               count("first_failure_line", p.first_failure_line)};
  f.summary = fmt::format("{} requests failed (the largest {}), the first at line {}", p.failures,
                          bytes_text(double(p.largest_failed_bytes)), p.first_failure_line);
  f.advice = "The allocator ran out. Compare the failed size with peak live: if the device had room in "
             "total, fragmentation is to blame (see that finding); otherwise cut the peak (smaller "
             "batches, activation checkpointing) or raise the memory limit.";
  out.findings.push_back(std::move(f));
}

void peak_to_average(const trace_profile& p, doctor_report& out) {
  if (p.allocations == 0 || p.peak_live_bytes == 0) return;
  finding f;
  f.id = "peak-to-average";
  const double r = p.mean_live_bytes > 0 ? static_cast<double>(p.peak_live_bytes) / p.mean_live_bytes : 0.0;
  const char* weight = p.mean_time_weighted ? "time_weighted" : "op_weighted";
  f.figures = {count("peak_live_bytes", p.peak_live_bytes),
               ratio(fmt::format("{}_mean_live_bytes", weight), p.mean_live_bytes),
               ratio("peak_to_average", r), count("peak_line", p.peak_line),
               ratio("idle_share_of_peak", r > 0 ? 1.0 - 1.0 / r : 0.0)};
  f.summary = fmt::format("peak live {} (line {}) is {:.2f}x the {} mean of {}",
                          bytes_text(double(p.peak_live_bytes)), p.peak_line, r,
                          p.mean_time_weighted ? "time-weighted" : "per-row", bytes_text(p.mean_live_bytes));
  f.advice = "The job needs its peak, so this costs it nothing; what it holds above its mean is idle "
             "most of the time, for another job to use: release cached memory between phases (pool "
             "trim, a release threshold) where the device is shared.";
  out.findings.push_back(std::move(f));
}

void hot_allocation_sizes(const trace_profile& p, doctor_report& out) {
  if (p.top_sizes.empty()) return;
  finding f;
  f.id = "hot-allocation-sizes";
  std::string list;
  double covered = 0;
  for (std::size_t i = 0; i < p.top_sizes.size(); ++i) {
    const auto [size, n] = p.top_sizes[i];
    const double s = share(n, p.allocations);
    covered += s;
    f.figures.push_back(count(fmt::format("top{}_size_bytes", i + 1), size));
    f.figures.push_back(count(fmt::format("top{}_allocations", i + 1), n));
    f.figures.push_back(ratio(fmt::format("top{}_share", i + 1), s));
    list += fmt::format("{}{} B x{} ({:.1f}%)", i ? ", " : "", size, n, 100 * s);
  }
  f.figures.push_back(ratio("top_sizes_share", covered));
  f.summary = fmt::format("the {} most frequent sizes make {:.1f}% of allocations: {}",
                          p.top_sizes.size(), 100 * covered, list);
  f.advice = "These sizes dominate the allocator's traffic: they are the ones worth an exact size "
             "class, a preallocated buffer, or reuse across steps.";
  out.findings.push_back(std::move(f));
}

// Each finding's cost share from its bytes and seconds (unless it set one: a job that fails), its
// severity from that, and the findings costliest first.
void rank_by_cost(const doctor_thresholds& th, doctor_report& out) {
  for (auto& f : out.findings) {
    if (f.cost_share == 0.0) {
      const double bytes = out.device_bytes ? f.cost_bytes / static_cast<double>(out.device_bytes) : 0.0;
      const double time = out.job_seconds > 0 ? f.cost_seconds / out.job_seconds : 0.0;
      f.cost_share = std::min(1.0, std::max(bytes, time));
    }
    f.level = severity_for_cost(f.cost_share, th);
  }
  std::stable_sort(out.findings.begin(), out.findings.end(),
                   [](const finding& a, const finding& b) { return a.cost_share > b.cost_share; });
}

}  // namespace

doctor_report diagnose(const trace& t, const doctor_options& opts) {
  const auto& th = opts.thresholds;
  if (th.alignment_bytes == 0) throw std::invalid_argument("doctor: alignment_bytes must be > 0");
  if (th.granule_bytes == 0) throw std::invalid_argument("doctor: granule_bytes must be > 0");
  const trace_profile p = detail::profile_trace(t, th.small_bytes, th.alignment_bytes, th.hot_sizes);
  doctor_report out;
  out.trace = t.name;
  out.rows = p.rows;
  out.allocations = p.allocations;
  out.frees = p.frees;
  out.allocate_failures = p.failures;
  out.duration_seconds = p.duration_seconds;
  out.peak_live_bytes = p.peak_live_bytes;
  out.device_bytes = opts.replay.capacity_bytes;
  out.job_seconds_estimated = !(p.timed && p.duration_seconds > 0.0);
  out.job_seconds = std::max(th.min_job_seconds, out.job_seconds_estimated
                                                     ? static_cast<double>(p.rows) * th.untimed_us_per_row * 1e-6
                                                     : p.duration_seconds);
  if (opts.pinned) out.pinned_trace = opts.pinned->name;
  small_object_churn(p, th, out);
  fragmentation(t, p, opts, out);
  cross_stream_free(p, out);
  unaligned_sizes(p, th, out);
  leak(p, th, out);
  alloc_failure(p, out);
  detail::capture_frees(t, out);
  peak_to_average(p, out);
  hot_allocation_sizes(p, out);
  detail::pinned_memory(opts, out);
  rank_by_cost(th, out);
  return out;
}

}  // namespace gpumem
