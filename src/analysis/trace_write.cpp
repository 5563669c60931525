// Writers for RMM's log CSV, the inverse of the reader: what they write reads back to the same
// records (the round trip is tested). fmt into a stack buffer, one write per row.
#include <iterator>
#include <ostream>

#include <fmt/format.h>

#include "gpumem/detail/trace_format.hpp"
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
  detail::append_trace_record(buf, r);
  out.write(buf.data(), static_cast<std::streamsize>(buf.size()));
}

void write_capture_record(std::ostream& out, std::uint64_t thread, std::int64_t time_us, bool begin,
                          std::uint64_t stream) {
  fmt::memory_buffer buf;
  detail::append_capture_record(buf, thread, time_us, begin, stream);
  out.write(buf.data(), static_cast<std::streamsize>(buf.size()));
}

}  // namespace gpumem
