// Judges a trace's profile against the thresholds in doctor.hpp and words the findings. Each
// finding is built by one function, in the order the header lists them; pinned-memory, which
// judges a second trace, lives in doctor_pinned.cpp.
#include "gpumem/doctor.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>

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
  // A trace with no times has no rate: judge it on its share alone.
  const bool fast = !p.timed || p.duration_seconds <= 0.0 ||
                    static_cast<double>(p.small_allocations) / p.duration_seconds >= th.small_per_second_warning;
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
  f.level = s >= th.small_share_warning && fast ? severity::warning : severity::info;
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

double remapped_per_1000_ops(const replay_result& r) { return r.per_1000_ops(r.stats.maps + r.stats.unmaps); }

double driver_us_per_op(const replay_result& r, const doctor_thresholds& th) {
  const double us = static_cast<double>(r.stats.maps) * th.map_us_per_granule +
                    static_cast<double>(r.stats.unmaps) * th.unmap_us_per_granule;
  return r.ops ? us / static_cast<double>(r.ops) : 0.0;
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
// remaps, the reserve grows by a sixteenth of the start, at most reserve_search_steps times (bert's
// trace: 754 MiB growing first, 80 granules a pass by default on it, none on 801 MiB). A smaller
// reserve is no sure saving: on bert's trace 600–700 MiB still moved 400–675 granules a pass
// (bench/RESULTS.md, session 17). False, with the reason in `skipped`, when it cannot be replayed.
constexpr int reserve_search_steps = 4;
bool reserve_alternative(const trace& t, const doctor_options& opts, finding& f, std::string& sentence,
                         doctor_report& out) {
  replay_options ro = opts.replay;
  ro.resource = "pool";
  ro.passes = 2;
  ro.min_ops = 0;
  try {
    ro.pool.grow_before_reclaim = true;
    const std::size_t grown = opts.replayer(t, ro).peak_reserved_bytes;
    ro.pool.grow_before_reclaim = opts.replay.pool.grow_before_reclaim;
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
// granule mapped or unmapped is a driver call of tens of µs.
void slow_path_remapping(const trace& t, const doctor_options& opts, const replay_result& pool,
                         doctor_report& out) {
  const auto& th = opts.thresholds;
  replay_options ro = opts.replay;
  ro.resource = "pool";
  ro.pool.idle_budget = th.remap_alternative_idle_budget;
  const replay_result alt = opts.replayer(t, ro);
  const double per_1000 = remapped_per_1000_ops(pool), alt_per_1000 = remapped_per_1000_ops(alt);
  const double us_per_op = driver_us_per_op(pool, th), alt_us_per_op = driver_us_per_op(alt, th);
  const double alt_frag = alt.fragmentation;
  finding f;
  f.id = "slow-path-remapping";
  f.figures = {ratio("granules_remapped_per_1000_ops", per_1000), ratio("estimated_h200_us_per_op", us_per_op),
               ratio("alternative_idle_budget", th.remap_alternative_idle_budget),
               ratio("alternative_granules_remapped_per_1000_ops", alt_per_1000),
               ratio("alternative_estimated_h200_us_per_op", alt_us_per_op),
               ratio("alternative_fragmentation", alt_frag)};
  f.level = us_per_op >= th.remap_warning_us_per_op ? severity::warning : severity::info;
  f.summary = fmt::format("the default pool maps and unmaps {:.1f} granules per 1000 ops to stay tight: at least "
                          "{:.2f} µs per op of driver calls on an H200; with idle_budget {:g}, {:.1f} per 1000 ops "
                          "({:.2f} µs) at {:.3f}x peak reserved / peak live",
                          per_1000, us_per_op, th.remap_alternative_idle_budget, alt_per_1000, alt_us_per_op,
                          alt_frag);
  f.advice = "Each granule the pool remaps is a CUDA driver call of tens of µs. If the job's shapes keep "
             "changing and its time matters more than the last percents of memory, give the pool an idle "
             "budget (pool_options::idle_budget; gpumem's PyTorch and CuPy adaptor use 0.05): it keeps that "
             "fraction of live memory mapped instead of moving it.";
  // Only a pool that remaps has anything for a reserve to save.
  std::string sentence;
  if (pool.stats.maps + pool.stats.unmaps > 0 && reserve_alternative(t, opts, f, sentence, out)) {
    f.summary += sentence;
    f.advice += " Or size the pool for the job once, at start-up: pool_options::initial_reserve_bytes "
                "(`--initial-reserve`; `initial_reserve` in the PyTorch adaptor's config) maps that memory "
                "when the pool is made, free for every stream, so the job's steps find it mapped.";
  }
  out.findings.push_back(std::move(f));
}

// The fragmentation finding, then slow-path-remapping from the same default-pool replay.
void fragmentation(const trace& t, const trace_profile& p, const doctor_options& opts,
                   doctor_report& out) {
  if (!replayable(p, opts, out)) return;
  replay_options ro = opts.replay;
  ro.resource = "pool";
  const replay_result pool = opts.replayer(t, ro);
  ro.resource = "exact";
  const replay_result exact = opts.replayer(t, ro);
  const double live = static_cast<double>(exact.peak_reserved_bytes);
  const double frag = live > 0 ? static_cast<double>(pool.peak_reserved_bytes) / live : 1.0;
  const double gap = static_cast<double>(pool.peak_reserved_bytes) - live;
  finding f;
  f.id = "fragmentation";
  f.figures = {count("pool_peak_reserved_bytes", pool.peak_reserved_bytes),
               count("exact_peak_reserved_bytes", exact.peak_reserved_bytes),
               count("gap_bytes", gap > 0 ? static_cast<std::uint64_t>(gap) : 0),
               ratio("fragmentation", frag),
               count("pool_failed_allocations", pool.failed_allocs)};
  const auto& th = opts.thresholds;
  f.level = frag >= th.fragmentation_error     ? severity::error
            : frag >= th.fragmentation_warning ? severity::warning
                                               : severity::info;
  f.summary = fmt::format("the default pool peaks at {} reserved for {} live at peak: {:.3f}x "
                          "({} more than the exact floor)", bytes_text(double(pool.peak_reserved_bytes)),
                          bytes_text(live), frag, bytes_text(gap > 0 ? gap : 0.0));
  if (pool.failed_allocs > 0)
    f.summary += fmt::format("; {} requests failed in the replay", pool.failed_allocs);
  f.advice = "Reserved memory above the live peak is held in holes of the wrong size. Varying shapes "
             "cause it: pad shapes to a few buckets, or use an upstream that can remap physical pages "
             "(the virtual-memory arena, PyTorch's expandable_segments) so holes are given back.";
  out.findings.push_back(std::move(f));
  slow_path_remapping(t, opts, pool, out);
}

void cross_stream_free(const trace_profile& p, const doctor_thresholds& th, doctor_report& out) {
  if (p.cross_stream_frees == 0) return;
  finding f;
  f.id = "cross-stream-free";
  const double s = share(p.cross_stream_frees, p.frees);
  f.figures = {count("cross_stream_frees", p.cross_stream_frees), ratio("cross_stream_free_share", s),
               count("cross_stream_bytes", p.cross_stream_bytes)};
  f.level = s >= th.cross_stream_share_warning ? severity::warning : severity::info;
  f.summary = fmt::format("{} blocks ({:.1f}% of frees, {} in all) freed on a stream other than "
                          "their allocating one", p.cross_stream_frees, 100 * s,
                          bytes_text(double(p.cross_stream_bytes)));
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
  f.level = s >= th.unaligned_share_warning && cost >= th.unaligned_peak_cost_warning
                ? severity::warning
                : severity::info;
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
  f.level = accumulating ? severity::warning : severity::info;
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
  f.level = severity::error;
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

void peak_to_average(const trace_profile& p, const doctor_thresholds& th, doctor_report& out) {
  if (p.allocations == 0 || p.peak_live_bytes == 0) return;
  finding f;
  f.id = "peak-to-average";
  const double r = p.mean_live_bytes > 0 ? static_cast<double>(p.peak_live_bytes) / p.mean_live_bytes : 0.0;
  const char* weight = p.mean_time_weighted ? "time_weighted" : "op_weighted";
  f.figures = {count("peak_live_bytes", p.peak_live_bytes),
               ratio(fmt::format("{}_mean_live_bytes", weight), p.mean_live_bytes),
               ratio("peak_to_average", r), count("peak_line", p.peak_line)};
  f.level = r >= th.peak_to_average_warning ? severity::warning : severity::info;
  f.summary = fmt::format("peak live {} (line {}) is {:.2f}x the {} mean of {}",
                          bytes_text(double(p.peak_live_bytes)), p.peak_line, r,
                          p.mean_time_weighted ? "time-weighted" : "per-row", bytes_text(p.mean_live_bytes));
  f.advice = r >= th.peak_to_average_warning
                 ? "The job needs its peak only briefly: memory it reserves for the peak is idle most of "
                   "the time. Release cached memory between phases (pool trim, a release threshold), "
                   "or share the device with another job."
                 : "The footprint is steady: sizing the device or the pool's limit to the peak wastes "
                   "little.";
  out.findings.push_back(std::move(f));
}

void hot_allocation_sizes(const trace_profile& p, doctor_report& out) {
  if (p.top_sizes.empty()) return;
  finding f;
  f.id = "hot-allocation-sizes";
  f.level = severity::info;
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

}  // namespace

doctor_report diagnose(const trace& t, const doctor_options& opts) {
  const auto& th = opts.thresholds;
  if (th.alignment_bytes == 0) throw std::invalid_argument("doctor: alignment_bytes must be > 0");
  const trace_profile p = detail::profile_trace(t, th.small_bytes, th.alignment_bytes, th.hot_sizes);
  doctor_report out;
  out.trace = t.name;
  out.rows = p.rows;
  out.allocations = p.allocations;
  out.frees = p.frees;
  out.allocate_failures = p.failures;
  out.duration_seconds = p.duration_seconds;
  out.peak_live_bytes = p.peak_live_bytes;
  if (opts.pinned) out.pinned_trace = opts.pinned->name;
  small_object_churn(p, th, out);
  fragmentation(t, p, opts, out);
  cross_stream_free(p, th, out);
  unaligned_sizes(p, th, out);
  leak(p, th, out);
  alloc_failure(p, out);
  peak_to_average(p, th, out);
  hot_allocation_sizes(p, out);
  detail::pinned_memory(opts, out);
  return out;
}

}  // namespace gpumem
