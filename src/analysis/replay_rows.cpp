// replay()'s general path, a row at a time; see replay_rows.hpp.
#include "replay_rows.hpp"

#include <algorithm>
#include <chrono>
#include <unordered_map>
#include <utility>

namespace gpumem::detail {

namespace {

bool several_threads(const trace& t) {
  return std::any_of(t.records.begin(), t.records.end(),
                     [&](const trace_record& r) { return r.thread != t.records.front().thread; });
}

}  // namespace

bool needs_rows(const trace& t, const replay_options& o) {
  // Progress is not here: the lean path reports it between chunks of ops, outside the clock.
  return o.timeline_points > 0 || o.segment_map_at_peak || o.check_integrity || o.verify_every > 0 ||
         (o.recorded_threads && several_threads(t));
}

row_replay::row_replay(const trace& t, const replay_plan& plan, std::vector<stream_ref> streams,
                       const replay_options& o, replay_target& tgt, replay_integrity* integrity, std::size_t passes, replay_result& r)
    : t_(t),
      plan_(plan),
      streams_(std::move(streams)),
      o_(o),
      tgt_(tgt),
      integrity_(integrity),
      passes_(passes),
      r_(r),
      op_at_row_(plan.rows, no_op),
      live_(plan.slots),
      instrumented_(o.timeline_points > 0 || o.segment_map_at_peak),
      stride_(o.timeline_points ? std::max<std::uint64_t>(1, plan.rows / o.timeline_points) : 0) {
  for (std::size_t k = 0; k < plan.ops.size(); ++k) op_at_row_[plan.ops[k].row] = static_cast<std::uint32_t>(k);
  if (o.recorded_threads) {
    std::unordered_map<std::uint64_t, std::uint32_t> worker_of_thread;
    std::vector<std::uint32_t> worker_of(plan.rows);
    for (std::size_t i = 0; i < plan.rows; ++i) {
      const auto [it, fresh] =
          worker_of_thread.try_emplace(t.records[i].thread, static_cast<std::uint32_t>(worker_of_thread.size()));
      worker_of[i] = it->second;
    }
    if (worker_of_thread.size() > 1) lockstep_.emplace(std::move(worker_of));
  }
}

double row_replay::run_pass(std::size_t pass) {
  const auto start = std::chrono::steady_clock::now();
  if (lockstep_)
    lockstep_->run([&](std::size_t i) { row(pass, i); });
  else
    for (std::uint64_t i = 0; i < plan_.rows; ++i) row(pass, i);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

void row_replay::row(std::size_t pass, std::uint64_t i) {
  const trace_record& rec = t_.records[i];
  if (const std::uint32_t k = op_at_row_[i]; k != no_op) {
    const replay_plan::op& op = plan_.ops[k];
    const stream_ref s = streams_[op.stream];
    live_block& b = live_[op.slot];
    if (op.alloc) {
      void* p = tgt_.allocate(op.size, s);
      if (!p && op.size) ++failed_;
      b = {p, op.size, true, s, {}};
      if (integrity_ && p) b.ticket = integrity_->allocated(p, op.size, s, i, pass);
      live_bytes_ += op.size;
    } else {
      free_block(b, s);
    }
  }
  if (instrumented_) {
    const std::size_t reserved = tgt_.reserved();
    if (stride_ && (i % stride_ == 0 || i + 1 == plan_.rows))
      r_.timeline.push_back({i, rec.time_us, live_bytes_, reserved});
    if (o_.segment_map_at_peak && reserved > peak_reserved_seen_) {
      peak_reserved_seen_ = reserved;
      r_.segment_map_at_peak = tgt_.blocks();
      r_.peak_op = i;
    }
  }
  if (o_.progress && (i & 0xffff) == 0) o_.progress(pass * plan_.rows + i, passes_ * plan_.rows);
}

void row_replay::free_block(live_block& b, stream_ref s) {
  if (b.ptr) {
    if (integrity_) integrity_->freeing(b.ptr, b.bytes, b.ticket, b.stream, s);
    tgt_.deallocate(b.ptr, b.bytes, s);
  }
  live_bytes_ -= b.bytes;
  b = {};
}

void row_replay::free_live() {
  for (live_block& b : live_)
    if (b.live) free_block(b, b.stream);
}

}  // namespace gpumem::detail
