// The replay engine: a trace's requests, in file order, through one resource on the simulated
// device. Each distinct Stream value is its own stream. The trace's free rows are moments the
// memory was already reusable (PyTorch's free_completed), so the simulated streams complete at
// once: replay measures placement and bookkeeping, not waiting.
#include "gpumem/replay.hpp"

#include <fmt/format.h>

#include <chrono>
#include <cstddef>
#include <optional>
#include <stdexcept>
#include <unordered_map>

#include "core/lockstep_threads.hpp"
#include "core/replay_integrity.hpp"

namespace gpumem {

trace_slots resolve_slots(const trace& t) {
  trace_slots out;
  out.slot_of.assign(t.records.size(), trace_slots::no_slot);
  std::unordered_map<std::uint64_t, std::uint32_t> open;
  std::vector<std::uint32_t> free_slots;
  for (std::size_t i = 0; i < t.records.size(); ++i) {
    const trace_record& rec = t.records[i];
    if (rec.action == trace_action::allocate) {
      std::uint32_t k;
      if (!free_slots.empty()) {
        k = free_slots.back();
        free_slots.pop_back();
      } else {
        k = out.count++;
      }
      open[rec.pointer] = k;
      out.slot_of[i] = k;
    } else if (rec.action == trace_action::free) {
      auto it = open.find(rec.pointer);
      if (it == open.end()) continue;  // read_trace validated it; a hand-built trace may not be
      out.slot_of[i] = it->second;
      free_slots.push_back(it->second);
      open.erase(it);
    }
  }
  return out;
}

namespace {

// Passes a soak needs for at least `min_ops` ops, or the fixed count when min_ops is 0.
std::size_t passes_for(const replay_options& o, const trace_slots& slots, const trace& t) {
  if (!o.min_ops) return std::max<std::size_t>(1, o.passes);
  std::uint64_t ops_per_pass = 0;
  for (std::size_t i = 0; i < t.records.size(); ++i)
    ops_per_pass += t.records[i].action == trace_action::allocate || slots.slot_of[i] != trace_slots::no_slot;
  if (!ops_per_pass) throw std::invalid_argument(fmt::format("{}: no operations to replay", t.name));
  return static_cast<std::size_t>((o.min_ops + ops_per_pass - 1) / ops_per_pass);
}

// A soak's per-pass log keeps at most this many entries (every k-th pass, and the last).
constexpr std::size_t max_pass_log = 1000;

// replay_options::trace_clock: the job's time at the row being replayed, in ns since its first row.
class trace_time {
 public:
  void at(std::int64_t time_us) {
    if (time_us < 0) return;
    constexpr std::int64_t day_us = 24LL * 3600 * 1000000, half_day_us = day_us / 2;
    if (first_us_ < 0) first_us_ = time_us;
    if (last_us_ >= 0 && time_us + day_offset_us_ < last_us_ - half_day_us) day_offset_us_ += day_us;
    last_us_ = std::max(last_us_, time_us + day_offset_us_);
    now_ns_ = static_cast<std::uint64_t>(pass_offset_us_ + last_us_ - first_us_) * 1000;
  }
  // The next pass starts right after this one ended.
  void next_pass() {
    if (last_us_ < 0) return;
    pass_offset_us_ += last_us_ - first_us_ + 1;
    first_us_ = last_us_ = -1;
    day_offset_us_ = 0;
  }
  std::uint64_t now_ns() const { return now_ns_; }

 private:
  std::int64_t first_us_ = -1, last_us_ = -1, day_offset_us_ = 0, pass_offset_us_ = 0;
  std::uint64_t now_ns_ = 0;
};

}  // namespace

replay_result replay(const trace& t, const replay_options& given) {
  // Declared before the target, whose pool may read it until the target goes.
  trace_time job_time;
  replay_options opts = given;
  if (opts.trace_clock) opts.pool.remap_clock_ns = [&job_time] { return job_time.now_ns(); };
  auto tgt = make_replay_target(opts);
  replay_result r;
  r.trace = t.name;
  r.resource = opts.resource;

  const std::uint64_t total = t.records.size();
  const trace_slots slots = resolve_slots(t);
  const std::vector<std::uint32_t>& slot_of = slots.slot_of;
  struct live_block {
    void* ptr = nullptr;
    std::size_t bytes = 0;
    bool live = false;
    stream_ref stream = 0;  // allocated on: what is left live at a pass end is freed there
    replay_integrity::ticket ticket;
  };
  std::vector<live_block> live(slots.count);
  std::optional<replay_integrity> integrity;
  if (opts.check_integrity || opts.verify_every)
    integrity.emplace(t, opts.verify_every, opts.integrity_alignment ? opts.integrity_alignment : tgt->alignment(),
                      opts.verify_every ? tgt->make_verifier() : nullptr);

  const bool instrumented = opts.timeline_points > 0 || opts.segment_map_at_peak;
  const std::uint64_t stride = opts.timeline_points ? std::max<std::uint64_t>(1, total / opts.timeline_points) : 0;
  std::size_t live_bytes = 0, peak_live = 0, peak_reserved_seen = 0;

  const std::size_t passes = passes_for(opts, slots, t);
  const std::size_t log_every = (passes + max_pass_log - 1) / max_pass_log;
  r.passes = passes;
  auto free_block = [&](live_block& b, stream_ref s) {
    if (b.ptr) {
      if (integrity) integrity->freeing(b.ptr, b.bytes, b.ticket, b.stream, s);
      tgt->deallocate(b.ptr, b.bytes, s);
    }
    live_bytes -= b.bytes;
    b = {};
  };
  // recorded_threads: a worker thread per thread of the trace, each issuing that thread's rows, in
  // trace order (lockstep_threads.hpp). Worker threads live across passes, as a job's threads do.
  std::optional<detail::lockstep_threads> lockstep;
  if (opts.recorded_threads) {
    std::unordered_map<std::uint64_t, std::uint32_t> worker_of_thread;
    std::vector<std::uint32_t> worker_of(total);
    for (std::uint64_t i = 0; i < total; ++i) {
      const auto [it, fresh] = worker_of_thread.try_emplace(t.records[i].thread,
                                                              static_cast<std::uint32_t>(worker_of_thread.size()));
      worker_of[i] = it->second;
    }
    if (worker_of_thread.size() > 1) lockstep.emplace(std::move(worker_of));
  }
  const auto start = std::chrono::steady_clock::now();
  for (std::size_t pass = 0; pass < passes; ++pass) {
  if (pass == 1) r.reserved_after_first_pass_bytes = tgt->peak_reserved();
  if (pass > 0) job_time.next_pass();
  auto step = [&](std::uint64_t i) {
    const trace_record& rec = t.records[i];
    if (opts.trace_clock) job_time.at(rec.time_us);
    switch (rec.action) {
      case trace_action::allocate: {
        const stream_ref s = tgt->stream_for(rec.stream);
        void* p = tgt->allocate(rec.size, s);
        if (!p && rec.size) ++r.failed_allocs;
        live_block& b = live[slot_of[i]];
        b = {p, rec.size, true, s, {}};
        if (integrity && p) b.ticket = integrity->allocated(p, rec.size, s, i, pass);
        live_bytes += rec.size;
        peak_live = std::max(peak_live, live_bytes);
        ++r.ops;
        break;
      }
      case trace_action::free: {
        if (slot_of[i] == trace_slots::no_slot) break;
        free_block(live[slot_of[i]], tgt->stream_for(rec.stream));
        ++r.ops;
        break;
      }
      case trace_action::allocate_failure: ++r.trace_failures; break;
    }
    if (instrumented) {
      const std::size_t reserved = tgt->reserved();
      if (stride && (i % stride == 0 || i + 1 == total))
        r.timeline.push_back({i, rec.time_us, live_bytes, reserved});
      if (opts.segment_map_at_peak && reserved > peak_reserved_seen) {
        peak_reserved_seen = reserved;
        r.segment_map_at_peak = tgt->blocks();
        r.peak_op = i;
      }
    }
    if (opts.progress && (i & 0xffff) == 0) opts.progress(pass * total + i, passes * total);
  };
  if (lockstep)
    lockstep->run(step);
  else
    for (std::uint64_t i = 0; i < total; ++i) step(i);
  const bool last = pass + 1 == passes;
  const pool_stats so_far = tgt->stats();
  soak_pass log_entry{pass, tgt->reserved(), tgt->peak_reserved(), 0, so_far.maps + so_far.unmaps,
                      so_far.map_calls + so_far.unmap_calls,
                      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(),
                      so_far.driver_maps + so_far.driver_unmaps};
  // A soak's next pass starts from what the trace left live: give it back so slots start clean.
  if (!last)
    for (auto& b : live)
      if (b.live) free_block(b, b.stream);
  if (integrity) {
    integrity->pass_done(pass);  // on the GPU: waits for the pass's checks, so they are timed
    log_entry.integrity_mismatches = integrity->mismatches();
  }
  if (passes > 1 && (pass % log_every == 0 || last)) r.pass_log.push_back(log_entry);
  }
  const auto elapsed = std::chrono::steady_clock::now() - start;
  if (opts.progress) opts.progress(passes * total, passes * total);
  if (passes > 1 && r.reserved_after_first_pass_bytes) {
    r.max_reserved_later_passes_bytes = tgt->peak_reserved();
    r.soak_growth = double(r.max_reserved_later_passes_bytes) / double(r.reserved_after_first_pass_bytes) - 1.0;
  }

  r.peak_live_bytes = peak_live;
  r.peak_reserved_bytes = tgt->peak_reserved();
  r.final_reserved_bytes = tgt->reserved();
  r.fragmentation = peak_live ? double(r.peak_reserved_bytes) / double(peak_live) : 0.0;
  r.ns_per_op = r.ops ? double(std::chrono::duration_cast<std::chrono::nanoseconds>(elapsed).count()) / double(r.ops) : 0.0;
  r.stats = tgt->stats();
  // Leave nothing behind in the target (its destructor would report leaks otherwise); the blocks
  // still live are checked like any other.
  for (auto& b : live)
    if (b.live) free_block(b, b.stream);
  if (integrity) {
    integrity->pass_done(passes - 1);
    integrity->report_into(r);
    if (!r.pass_log.empty()) r.pass_log.back().integrity_mismatches = integrity->mismatches();
  }
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
