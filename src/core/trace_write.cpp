// Writers for RMM's log CSV, the inverse of the reader: what they write reads back to the same
// records (the round trip is tested). fmt into a stack buffer, one write per row.
#include <iterator>
#include <ostream>

#include <fmt/format.h>

#include "gpumem/trace.hpp"

namespace gpumem {

const char* to_string(trace_action a) noexcept {
  switch (a) {
    case trace_action::allocate: return "allocate";
    case trace_action::free: return "free";
    case trace_action::allocate_failure: return "allocate failure";
  }
  return "unknown";
}

void write_trace_header(std::ostream& out) { out << "Thread,Time,Action,Pointer,Size,Stream\n"; }

void write_trace_record(std::ostream& out, const trace_record& r) {
  fmt::memory_buffer buf;
  auto it = fmt::format_to(std::back_inserter(buf), "{},", r.thread);
  if (r.time_us >= 0) {
    // Microseconds since midnight back to HH:MM:SS.micro. The format is a wall clock with no
    // date (as RMM writes it), so a time past 24 h wraps like the clock does.
    const std::int64_t us = r.time_us % 1000000;
    const std::int64_t s = r.time_us / 1000000 % 86400;
    it = fmt::format_to(it, "{:02}:{:02}:{:02}.{:06}", s / 3600, s / 60 % 60, s % 60, us);
  }
  fmt::format_to(it, ",{},0x{:x},{},0x{:x}\n", to_string(r.action), r.pointer, r.size, r.stream);
  out.write(buf.data(), static_cast<std::streamsize>(buf.size()));
}

}  // namespace gpumem
