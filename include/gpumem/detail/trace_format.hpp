#pragma once
// One RMM log CSV row into an fmt buffer: shared by write_trace_record and the trace adaptor, so
// both write exactly the same text.
#include <cstdint>
#include <iterator>

#include <fmt/format.h>

#include "gpumem/trace.hpp"

namespace gpumem::detail {

// The row's start: its thread and time (empty when time_us < 0), up to the Action field's comma.
inline auto append_row_start(fmt::memory_buffer& buf, std::uint64_t thread, std::int64_t time_us) {
  auto it = fmt::format_to(std::back_inserter(buf), "{},", thread);
  if (time_us >= 0) {
    // Microseconds since midnight back to HH:MM:SS.micro. The format is a wall clock with no
    // date (as RMM writes it), so a time past 24 h wraps like the clock does.
    const std::int64_t us = time_us % 1000000;
    const std::int64_t s = time_us / 1000000 % 86400;
    it = fmt::format_to(it, "{:02}:{:02}:{:02}.{:06}", s / 3600, s / 60 % 60, s % 60, us);
  }
  return it;
}

inline void append_trace_record(fmt::memory_buffer& buf, const trace_record& r) {
  fmt::format_to(append_row_start(buf, r.thread, r.time_us), ",{},0x{:x},{},0x{:x}\n", to_string(r.action), r.pointer,
                 r.size, r.stream);
}

// A capture_begin / capture_end row on `stream` (gpumem/trace.hpp, trace_capture).
inline void append_capture_record(fmt::memory_buffer& buf, std::uint64_t thread, std::int64_t time_us, bool begin,
                                  std::uint64_t stream) {
  fmt::format_to(append_row_start(buf, thread, time_us), ",{},0x0,0,0x{:x}\n", begin ? "capture_begin" : "capture_end",
                 stream);
}

}  // namespace gpumem::detail
