#pragma once
// replay()'s general path: every row of the trace, dropped ones included, for the features that
// need a row at a time: a timeline, the segment map at peak reserved, integrity checks, and the
// recorded threads in lockstep. Without any of them replay() runs the lean loop of
// replay_loop.hpp instead. Both replay the same plan on the same streams, so they hand the target
// the same requests: the results differ only in time.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "lockstep_threads.hpp"
#include "replay_integrity.hpp"
#include "gpumem/replay.hpp"
#include "gpumem/detail/replay_plan.hpp"

namespace gpumem::detail {

// True when `o` asks for something only the general path does (see the top of this file).
bool needs_rows(const trace& t, const replay_options& o);

class row_replay {
 public:
  // `streams[i]`: the target's stream for plan.streams[i]. Timeline and segment map go to `r`.
  // Everything given must outlive it.
  row_replay(const trace& t, const replay_plan& plan, std::vector<stream_ref> streams, const replay_options& o,
             replay_target& tgt, replay_integrity* integrity, std::size_t passes,
             replay_result& r);

  // Replays every row once; returns the seconds it took.
  double run_pass(std::size_t pass);
  // Frees what a pass left live, each block on the stream it was allocated on (and checked, with
  // integrity on), in slot order.
  void free_live();
  std::size_t peak_live_bytes() const noexcept { return plan_.peak_live_bytes; }
  std::uint64_t failed_allocs() const noexcept { return failed_; }

 private:
  struct live_block {
    void* ptr = nullptr;
    std::size_t bytes = 0;
    bool live = false;      // a failed request is live too, with no pointer: its bytes count
    stream_ref stream = {};  // allocated on
    replay_integrity::ticket ticket;
  };
  static constexpr std::uint32_t no_op = UINT32_MAX;

  void row(std::size_t pass, std::uint64_t i);
  void free_block(live_block& b, stream_ref s);

  const trace& t_;
  const replay_plan& plan_;
  const std::vector<stream_ref> streams_;
  const replay_options& o_;
  replay_target& tgt_;
  replay_integrity* const integrity_;
  const std::size_t passes_;
  replay_result& r_;
  std::vector<std::uint32_t> op_at_row_;  // the plan's op of each row; no_op for a dropped row
  std::vector<live_block> live_;
  // recorded_threads with more than one thread in the trace: a worker thread per thread of the
  // trace, each issuing that thread's rows, in trace order (lockstep_threads.hpp). Worker threads
  // live across passes, as a job's threads do.
  std::optional<lockstep_threads> lockstep_;
  const bool instrumented_;
  const std::uint64_t stride_;  // timeline: a point every this many rows; 0: no timeline
  std::size_t live_bytes_ = 0, peak_reserved_seen_ = 0;  // live: for the timeline
  std::uint64_t failed_ = 0;
};

}  // namespace gpumem::detail
