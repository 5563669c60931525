// The replay engine: a trace's requests, in file order, through one resource on the simulated
// device. Each distinct Stream value is its own stream. The trace's free rows are moments the
// memory was already reusable (PyTorch's free_completed), so the simulated streams complete at
// once: replay measures placement and bookkeeping, not waiting.
//
// The trace becomes a replay_plan before any clock starts, and each of its streams a stream of the
// target (stream_for, once per stream: a GPU target creates its streams then). A pass then runs
// the shared loop of replay_loop.hpp, the one `gpumem bench` times every allocator with, unless an
// option needs the trace a row at a time (replay_rows.hpp). Only the passes are timed: freeing
// what a pass leaves live, between a soak's passes, is not.
#include "gpumem/replay.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <functional>
#include <optional>
#include <stdexcept>
#include <utility>
#include <vector>

#include "replay_integrity.hpp"
#include "replay_rows.hpp"
#include "gpumem/detail/replay_loop.hpp"
#include "gpumem/detail/replay_plan.hpp"

namespace gpumem {
namespace {

using clock_type = std::chrono::steady_clock;

double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

// Passes a soak needs for at least `min_ops` ops, or the fixed count when min_ops is 0.
std::size_t passes_for(const replay_options& o, const replay_plan& plan, const trace& t) {
  if (!o.min_ops) return std::max<std::size_t>(1, o.passes);
  const std::uint64_t ops_per_pass = plan.ops.size();
  if (!ops_per_pass) throw std::invalid_argument(fmt::format("{}: no operations to replay", t.name));
  return static_cast<std::size_t>((o.min_ops + ops_per_pass - 1) / ops_per_pass);
}

// A soak's per-pass log keeps at most this many entries (every k-th pass, and the last).
constexpr std::size_t max_pass_log = 1000;

// The lean path: the shared loop over the plan. With a progress callback, a pass runs in chunks
// and the callback is called between them, outside the clock.
class lean_replay {
 public:
  lean_replay(const replay_plan& plan, replay_target& tgt, const std::vector<stream_ref>& streams,
              const replay_options& o, std::size_t passes)
      : plan_(plan), calls_{tgt}, loop_(calls_, plan, streams), progress_(o.progress), passes_(passes) {}

  double run_pass(std::size_t pass) {
    const std::size_t n = plan_.ops.size(), chunk = progress_ ? progress_chunk : n;
    double seconds = 0;
    for (std::size_t first = 0; first < n; first += chunk) {
      if (progress_) progress_(pass * plan_.rows + plan_.ops[first].row, passes_ * plan_.rows);
      const auto t0 = clock_type::now();
      loop_.run(first, std::min(n, first + chunk));
      seconds += seconds_since(t0);
    }
    return seconds;
  }
  void free_live() { loop_.free_live(); }
  std::size_t peak_live_bytes() const noexcept { return plan_.peak_live_bytes; }
  std::uint64_t failed_allocs() const noexcept { return loop_.failed_allocs(); }

 private:
  static constexpr std::size_t progress_chunk = std::size_t{1} << 16;
  // replay_loop's allocator interface over a target's.
  struct target_calls {
    replay_target& t;
    void* alloc(std::size_t bytes, stream_ref s) { return t.allocate(bytes, s); }
    void free(void* p, std::size_t bytes, stream_ref s) { t.deallocate(p, bytes, s); }
  };
  const replay_plan& plan_;
  target_calls calls_;
  replay_loop<target_calls> loop_;
  const std::function<void(std::uint64_t, std::uint64_t)>& progress_;
  const std::size_t passes_;
};

// Runs the soak's passes with either path (lean_replay or detail::row_replay) and fills in what
// they measured.
template <class Path>
void soak(Path& path, replay_target& tgt, replay_integrity* integrity, std::size_t passes, bool settle,
          replay_result& r) {
  const std::size_t log_every = (passes + max_pass_log - 1) / max_pass_log;
  double seconds = 0;  // the passes' time so far
  for (std::size_t pass = 0; pass < passes; ++pass) {
    if (pass == 1) r.reserved_after_first_pass_bytes = tgt.peak_reserved();
    seconds += path.run_pass(pass);
    const bool last = pass + 1 == passes;
    const pool_stats so_far = tgt.stats();
    soak_pass log_entry{pass, tgt.reserved(), tgt.peak_reserved(), 0, so_far.maps + so_far.unmaps,
                        so_far.map_calls + so_far.unmap_calls, seconds, so_far.driver_maps + so_far.driver_unmaps};
    // A soak's next pass starts from what the trace left live: give it back so slots start clean.
    if (!last) path.free_live();
    if (!last && settle) tgt.settle();  // outside the clock, like the frees before it
    if (integrity) {
      const auto t0 = clock_type::now();
      integrity->pass_done(pass);  // on the GPU: waits for the pass's checks, so they are timed
      seconds += seconds_since(t0);
      log_entry.integrity_mismatches = integrity->mismatches();
    }
    if (passes > 1 && (pass % log_every == 0 || last)) r.pass_log.push_back(log_entry);
  }
  if (passes > 1 && r.reserved_after_first_pass_bytes) {
    r.max_reserved_later_passes_bytes = tgt.peak_reserved();
    r.soak_growth = double(r.max_reserved_later_passes_bytes) / double(r.reserved_after_first_pass_bytes) - 1.0;
  }
  r.failed_allocs = path.failed_allocs();
  r.peak_live_bytes = path.peak_live_bytes();
  r.peak_reserved_bytes = tgt.peak_reserved();
  r.final_reserved_bytes = tgt.reserved();
  r.fragmentation = r.peak_live_bytes ? double(r.peak_reserved_bytes) / double(r.peak_live_bytes) : 0.0;
  r.ns_per_op = r.ops ? seconds * 1e9 / double(r.ops) : 0.0;
  r.stats = tgt.stats();
  // Leave nothing behind in the target (its destructor would report leaks otherwise); the blocks
  // still live are checked like any other.
  path.free_live();
  if (integrity) {
    integrity->pass_done(passes - 1);
    integrity->report_into(r);
    if (!r.pass_log.empty()) r.pass_log.back().integrity_mismatches = integrity->mismatches();
  }
}

}  // namespace

replay_result replay(const trace& t, const replay_options& opts) {
  auto tgt = make_replay_target(opts);
  replay_result r;
  r.trace = t.name;
  r.resource = opts.resource;

  const replay_plan plan = make_replay_plan(t);
  std::vector<stream_ref> streams;
  streams.reserve(plan.streams.size());
  for (const std::uint64_t s : plan.streams) streams.push_back(tgt->stream_for(s));
  const std::size_t passes = passes_for(opts, plan, t);
  r.passes = passes;
  r.ops = passes * plan.ops.size();
  r.trace_failures = passes * plan.trace_failures;

  std::optional<replay_integrity> integrity;
  if (opts.check_integrity || opts.verify_every)
    integrity.emplace(t, opts.verify_every, opts.integrity_alignment ? opts.integrity_alignment : tgt->alignment(),
                      opts.verify_every ? tgt->make_verifier() : nullptr);
  replay_integrity* const checks = integrity ? &*integrity : nullptr;
  if (detail::needs_rows(t, opts)) {
    detail::row_replay rows(t, plan, std::move(streams), opts, *tgt, checks, passes, r);
    soak(rows, *tgt, checks, passes, opts.settle_between_passes, r);
  } else {
    lean_replay lean(plan, *tgt, streams, opts, passes);
    soak(lean, *tgt, checks, passes, opts.settle_between_passes, r);
  }
  if (opts.progress) opts.progress(passes * plan.rows, passes * plan.rows);
  return r;
}

std::size_t min_capacity(const trace& t, const replay_options& opts) {
  replay_options o = opts;
  o.timeline_points = 0;
  o.segment_map_at_peak = false;
  o.check_integrity = false;
  o.verify_every = 0;
  o.progress = nullptr;
  const std::size_t g = default_granularity;
  replay_result unlimited = replay(t, o);
  if (unlimited.failed_allocs) return 0;  // does not run even on the given capacity
  // Fits at hi; search the granule count between the live floor and the unlimited peak.
  std::size_t lo = unlimited.peak_live_bytes / g, hi = align_up(unlimited.peak_reserved_bytes, g) / g;
  if (lo == 0) lo = 1;
  while (lo < hi) {
    const std::size_t mid = lo + (hi - lo) / 2;
    o.capacity_bytes = mid * g;
    if (replay(t, o).failed_allocs == 0)
      hi = mid;
    else
      lo = mid + 1;
  }
  return hi * g;
}

}  // namespace gpumem
