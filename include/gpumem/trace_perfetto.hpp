#pragma once
// A trace's timeline in the Chrome trace / Perfetto JSON format (the Trace Event Format), for
// ui.perfetto.dev and chrome://tracing:
//   - counter tracks ("ph":"C") "live bytes" and, from a replay, "reserved bytes";
//   - one track per stream ("M" thread_name events name them), each allocation a complete event
//     ("ph":"X") from its allocate row to its free row, args size (bytes) and pointer. Lifetimes
//     that cross on one stream cannot nest on one track, so a stream's allocations are packed onto
//     as few lanes as nest properly: lane 0 is named "stream 0x..", lane k "stream 0x.. #k";
//   - ts and dur in µs from the trace's own times (since its first row; a clock that passes
//     midnight wraps). A trace without times uses the row index as its clock, and says so.
#include <cstdint>
#include <iosfwd>
#include <string>

#include "gpumem/replay.hpp"
#include "gpumem/trace.hpp"

namespace gpumem {

struct perfetto_options {
  // Reserved bytes come from a replay of the trace with a timeline point per row, through
  // replay.resource on the simulated device. False: live bytes only.
  bool reserved = true;
  replay_options replay;
};

struct perfetto_summary {
  std::uint64_t events = 0;
  std::uint64_t slices = 0;
  std::uint64_t tracks = 0;       // stream lanes
  bool reserved = false;          // the reserved counter is in the file
  bool trace_times = false;       // ts from the trace's times (else row indices)
  std::string note;               // what is missing and why; empty when nothing is
};

// Writes the JSON object ({"traceEvents":[...], ...}). Throws std::invalid_argument for an unknown
// replay resource.
perfetto_summary write_perfetto_json(std::ostream& out, const trace& t, const perfetto_options& opts = {});

}  // namespace gpumem
