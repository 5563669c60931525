#pragma once
// Allocation traces in RMM's log CSV: `Thread,Time,Action,Pointer,Size,Stream`, times
// `HH:MM:SS.micro`, actions `allocate`, `free`, `allocate failure`; plain or gzip.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <iosfwd>
#include <stdexcept>
#include <string>
#include <vector>

namespace gpumem {

enum class trace_action : std::uint8_t { allocate, free, allocate_failure };
const char* to_string(trace_action a) noexcept;

struct trace_record {
  std::uint64_t thread = 0;
  std::int64_t time_us = -1;   // microseconds since midnight; -1 where the row has no time
  trace_action action = trace_action::allocate;
  std::uint64_t pointer = 0;
  std::uint64_t size = 0;
  std::uint64_t stream = 0;
};

// A CUDA graph capture on one stream: the rows `capture_begin` and `capture_end` (Pointer and
// Size 0, Stream the capturing stream). They are kept apart from the records, so replay and the
// reports see the allocations only; the doctor reads them.
struct trace_capture {
  std::uint64_t stream = 0;
  std::size_t first = 0;         // index in records of the first row after capture_begin
  std::size_t last = SIZE_MAX;   // index of the first row after capture_end; SIZE_MAX: never ended
  std::uint64_t begin_line = 0;  // the capture_begin row's line
};

struct trace {
  std::string name;                    // file name as given
  std::vector<trace_record> records;   // in file order
  std::vector<std::uint64_t> lines;    // records[i] came from line lines[i] (1-based)
  std::vector<trace_capture> captures; // in the order they began
};

// A bad trace: names the file, the line (0 when not about one line) and what is wrong.
class trace_error : public std::runtime_error {
 public:
  trace_error(std::string file, std::uint64_t line, const std::string& what);
  const std::string& file() const noexcept { return file_; }
  std::uint64_t line() const noexcept { return line_; }

 private:
  std::string file_;
  std::uint64_t line_;
};

// Reads and validates a whole trace: syntax of every row, and its semantics (a free names a live
// pointer; an allocate does not reuse a pointer still live). Throws trace_error at the first fault.
trace read_trace(const std::filesystem::path& path);
trace parse_trace(std::istream& in, const std::string& name);

// Writers for the same format (the trace adaptor, converters, tests).
void write_trace_header(std::ostream& out);
void write_trace_record(std::ostream& out, const trace_record& r);
// A capture_begin (`begin`) or capture_end row; time_us < 0 leaves the time empty.
void write_capture_record(std::ostream& out, std::uint64_t thread, std::int64_t time_us, bool begin,
                          std::uint64_t stream);

}  // namespace gpumem
