#pragma once
// A trace made ready for a timed replay loop (replay_loop.hpp) before any clock starts, so that
// the loop does nothing per row but index arrays and call the allocator: rows that ask nothing of
// an allocator are dropped, pointers become dense slots (no hashing of addresses while timed) and
// the trace's Stream values dense stream indices (the caller resolves each to a stream of its
// allocator once, not per row). Shared by gpumem::replay, `gpumem bench` and bench/, so every
// allocator is timed by the same loop over the same plan.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "gpumem/trace.hpp"

namespace gpumem {

struct replay_plan {
  struct op {
    // The allocation's requested bytes, on its free as well: a free row's own Size is not what
    // the allocator was given.
    std::uint64_t size = 0;
    // Where the loop keeps the block: a slot is reused once its block is freed, so the slots are
    // as many as the most blocks live at once.
    std::uint32_t slot = 0;
    std::uint32_t stream = 0;  // index into `streams`
    std::uint32_t row = 0;     // the trace row it came from (integrity notes, timelines, the trace clock)
    bool alloc = false;        // allocate; else free
  };
  std::vector<op> ops;  // in trace order
  std::uint32_t slots = 0;
  // The trace's Stream value behind each dense index, in order of first use by an op; index 0 is
  // Stream 0, the default stream, whether the trace uses it or not.
  std::vector<std::uint64_t> streams{0};
  std::size_t rows = 0;  // the trace's rows, dropped ones included
  // The most requested bytes live at once, requests an allocator refuses included: the same for
  // every allocator and every pass, so no timed loop needs to track it.
  std::size_t peak_live_bytes = 0;
  // `allocate failure` rows: dropped (they ask nothing of an allocator) but reported per pass.
  std::uint64_t trace_failures = 0;
};

// Drops `allocate failure` rows and frees of pointers the trace never allocated (read_trace
// rejects those; a hand-built trace may have them). Throws std::length_error for a trace of 2^32
// rows or more.
replay_plan make_replay_plan(const trace& t);

}  // namespace gpumem
