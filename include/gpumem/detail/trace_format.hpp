#pragma once
// One RMM log CSV row into an fmt buffer: shared by write_trace_record and the trace adaptor, so
// both write exactly the same text.
#include <cstdint>
#include <iterator>

#include <fmt/format.h>

#include "gpumem/trace.hpp"

namespace gpumem::detail {

inline void append_trace_record(fmt::memory_buffer& buf, const trace_record& r) {
  auto it = fmt::format_to(std::back_inserter(buf), "{},", r.thread);
  if (r.time_us >= 0) {
    // Microseconds since midnight back to HH:MM:SS.micro. The format is a wall clock with no
    // date (as RMM writes it), so a time past 24 h wraps like the clock does.
    const std::int64_t us = r.time_us % 1000000;
    const std::int64_t s = r.time_us / 1000000 % 86400;
    it = fmt::format_to(it, "{:02}:{:02}:{:02}.{:06}", s / 3600, s / 60 % 60, s % 60, us);
  }
  fmt::format_to(it, ",{},0x{:x},{},0x{:x}\n", to_string(r.action), r.pointer, r.size, r.stream);
}

}  // namespace gpumem::detail
