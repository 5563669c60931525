// The RMM log CSV reader: syntax of every row, then the trace's semantics (which pointers are live).
// Speed matters (the largest shared trace has 635,696 rows): the text is one buffer, lines are
// found with memchr, fields parsed with std::from_chars; no regex and no per-field stream I/O. The
// rare error path does the slow work (looking for binary bytes, spelling out what was expected).
#include <charconv>
#include <cstring>
#include <istream>
#include <string>
#include <string_view>
#include <unordered_map>

#include <fmt/format.h>

#include "trace_bytes.hpp"
#include "gpumem/trace.hpp"

namespace gpumem {

trace_error::trace_error(std::string file, std::uint64_t line, const std::string& what)
    : std::runtime_error(line == 0 ? fmt::format("{}: {}", file, what)
                                   : fmt::format("{}:{}: {}", file, line, what)),
      file_(std::move(file)),
      line_(line) {}

namespace {

constexpr std::size_t max_line_bytes = std::size_t{1} << 20;
constexpr std::string_view expected_header = "Thread,Time,Action,Pointer,Size,Stream";
constexpr std::string_view columns[] = {"Thread", "Time", "Action", "Pointer", "Size", "Stream"};
constexpr std::size_t column_count = std::size(columns);

bool is_text_byte(unsigned char c) { return (c >= 0x20 && c < 0x7f) || c == '\t'; }

// What the parser knows of a pointer: live or not, its size and where that was said.
struct pointer_state {
  bool live = false;
  std::uint64_t size = 0;
  std::uint64_t line = 0;  // the allocate (when live) or the free (when not)
};

class parser {
 public:
  parser(std::string_view text, std::string name) : text_(text), name_(std::move(name)) {}

  trace run() {
    trace t;
    t.name = name_;
    // Rows are ~45-60 bytes; reserving up front saves a few reallocations of big vectors.
    const std::size_t guess = text_.size() / 40 + 1;
    t.records.reserve(guess);
    t.lines.reserve(guess);
    live_.reserve(4096);

    std::size_t pos = 0;
    if (text_.starts_with("\xEF\xBB\xBF")) pos = 3;  // a UTF-8 byte-order mark (spreadsheet exports)
    std::uint64_t line_no = 0;
    std::uint64_t first_empty = 0;  // an empty line is fine only if nothing but empty lines follow
    bool header_seen = false;
    while (pos < text_.size()) {
      ++line_no;
      std::string_view line = next_line(pos, line_no);
      if (line.empty()) {
        if (first_empty == 0) first_empty = line_no;
        continue;
      }
      if (first_empty != 0)
        fail(first_empty, "empty line inside the trace (empty lines are allowed only at the end)");
      if (!header_seen) {
        check_header(line, line_no);
        header_seen = true;
        continue;
      }
      int mark = 0;
      trace_record r = parse_row(line, line_no, mark);
      if (mark) {
        note_capture(t, r.stream, mark, line_no);
        continue;
      }
      check_semantics(r, line_no);
      t.records.push_back(r);
      t.lines.push_back(line_no);
    }
    if (!header_seen)
      fail(0, fmt::format("empty file: no header (expected `{}`)", expected_header));
    return t;
  }

  // A capture_begin (mark 1) or capture_end (mark 2) row on `stream`.
  void note_capture(trace& t, std::uint64_t stream, int mark, std::uint64_t line_no) const {
    trace_capture* open = nullptr;
    for (auto& c : t.captures)
      if (c.stream == stream && c.last == SIZE_MAX) open = &c;
    if (mark == 1) {
      if (open)
        fail(line_no, fmt::format("capture_begin on stream 0x{:x}, which captures already (capture_begin at line "
                                  "{})", stream, open->begin_line));
      t.captures.push_back({stream, t.records.size(), SIZE_MAX, line_no});
      return;
    }
    if (!open) fail(line_no, fmt::format("capture_end on stream 0x{:x}, which has no capture_begin", stream));
    open->last = t.records.size();
  }

 private:
  // The line starting at `pos` without its '\n' (and a CR before it: CRLF files are accepted);
  // moves `pos` past it.
  std::string_view next_line(std::size_t& pos, std::uint64_t line_no) {
    const char* begin = text_.data() + pos;
    const std::size_t rest = text_.size() - pos;
    const std::size_t scan = rest < max_line_bytes + 2 ? rest : max_line_bytes + 2;
    const void* nl = std::memchr(begin, '\n', scan);
    std::size_t len = nl ? static_cast<std::size_t>(static_cast<const char*>(nl) - begin) : scan;
    if (!nl && scan < rest) {
      fail(line_no, fmt::format("line is longer than {} bytes (is this a trace file?)", max_line_bytes));
    }
    pos += len + (nl ? 1 : 0);
    if (len > 0 && begin[len - 1] == '\r') --len;
    if (len > max_line_bytes)
      fail(line_no, fmt::format("line is longer than {} bytes (is this a trace file?)", max_line_bytes));
    return {begin, len};
  }

  [[noreturn]] void fail(std::uint64_t line_no, const std::string& what) const {
    throw trace_error(name_, line_no, what);
  }

  // A field did not parse. Garbage bytes make every field wrong at once, so say that instead of
  // naming whichever field happened to break first.
  [[noreturn]] void fail_row(std::string_view line, std::uint64_t line_no, const std::string& what) const {
    for (std::size_t i = 0; i < line.size(); ++i) {
      const auto c = static_cast<unsigned char>(line[i]);
      if (!is_text_byte(c))
        fail(line_no, fmt::format("binary data: byte 0x{:02x} at column {} (not a text CSV trace; "
                                  "gzip is the only compression read)", c, i + 1));
    }
    fail(line_no, what);
  }

  void check_header(std::string_view line, std::uint64_t line_no) const {
    if (line == expected_header) return;
    // Say precisely what is wrong: data where the header should be, an unknown column, a known
    // column out of RMM's order, or columns missing.
    for (unsigned char c : line)
      if (!is_text_byte(c)) fail_row(line, line_no, "");
    if (line.front() >= '0' && line.front() <= '9')
      fail(line_no, fmt::format("missing header: the first line looks like data; expected `{}`",
                                expected_header));
    std::size_t index = 0;
    std::size_t start = 0;
    while (start <= line.size()) {
      std::size_t comma = line.find(',', start);
      if (comma == std::string_view::npos) comma = line.size();
      const std::string_view col = line.substr(start, comma - start);
      bool known = false;
      for (auto c : columns) known = known || c == col;
      if (!known)
        fail(line_no, fmt::format("unknown column `{}` (column {}) in the header; expected `{}`", col,
                                  index + 1, expected_header));
      if (index >= column_count || columns[index] != col)
        fail(line_no, fmt::format("column `{}` is column {} of the header; RMM's order is `{}`", col,
                                  index + 1, expected_header));
      ++index;
      start = comma + 1;
    }
    std::string missing;
    for (std::size_t i = index; i < column_count; ++i) {
      if (!missing.empty()) missing.push_back(',');
      missing.append(columns[i]);
    }
    fail(line_no, fmt::format("header lacks column(s) `{}`; expected `{}`", missing, expected_header));
  }

  // `mark`: 1 for a capture_begin row, 2 for capture_end (the record then carries only its stream).
  trace_record parse_row(std::string_view line, std::uint64_t line_no, int& mark) const {
    std::string_view f[column_count];
    std::size_t n = 0;
    std::size_t start = 0;
    for (;;) {
      const std::size_t comma = line.find(',', start);
      if (n == column_count)
        fail_row(line, line_no, fmt::format("too many fields: expected {} (`{}`)", column_count,
                                            expected_header));
      if (comma == std::string_view::npos) {
        f[n++] = line.substr(start);
        break;
      }
      f[n++] = line.substr(start, comma - start);
      start = comma + 1;
    }
    if (n < column_count)
      fail_row(line, line_no, fmt::format("truncated line: {} field(s), expected {} (`{}`)", n,
                                          column_count, expected_header));
    trace_record r;
    r.thread = parse_decimal(f[0], "thread", line, line_no);
    r.time_us = parse_time(f[1], line, line_no);
    mark = f[2] == "capture_begin" ? 1 : f[2] == "capture_end" ? 2 : 0;
    if (!mark) r.action = parse_action(f[2], line, line_no);
    r.pointer = parse_hex(f[3], "pointer", line, line_no);
    r.size = parse_decimal(f[4], "size", line, line_no);
    r.stream = parse_hex(f[5], "stream", line, line_no);
    return r;
  }

  std::uint64_t parse_decimal(std::string_view s, const char* what, std::string_view line,
                              std::uint64_t line_no) const {
    std::uint64_t v = 0;
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v, 10);
    if (s.empty() || ec != std::errc{} || end != s.data() + s.size()) {
      const char* why = ec == std::errc::result_out_of_range ? "is too large for 64 bits"
                                                            : "is not a non-negative decimal number";
      fail_row(line, line_no, fmt::format("{} `{}` {}", what, s, why));
    }
    return v;
  }

  // A pointer (or stream) as RMM prints it: hex with a 0x prefix, and the null pointer also as
  // `(nil)` (glibc's printf %p: a failed allocation's pointer) or `0` (%llx, and an ostream's
  // spelling of the default stream).
  std::uint64_t parse_hex(std::string_view s, const char* what, std::string_view line,
                          std::uint64_t line_no) const {
    constexpr const char* expected = "is not hex with a 0x prefix (like 0x7f3a00000000) nor a null "
                                     "pointer (0x0, 0 or (nil))";
    if (s == "(nil)" || s == "0") return 0;
    std::uint64_t v = 0;
    if (s.size() < 3 || s[0] != '0' || (s[1] != 'x' && s[1] != 'X'))
      fail_row(line, line_no, fmt::format("{} `{}` {}", what, s, expected));
    const auto [end, ec] = std::from_chars(s.data() + 2, s.data() + s.size(), v, 16);
    if (ec != std::errc{} || end != s.data() + s.size()) {
      const char* why = ec == std::errc::result_out_of_range ? "is too large for 64 bits" : expected;
      fail_row(line, line_no, fmt::format("{} `{}` {}", what, s, why));
    }
    return v;
  }

  // `HH:MM:SS` with an optional fraction of 1-9 digits (RMM writes 6), to microseconds since
  // midnight. Empty means the row has no time: -1.
  std::int64_t parse_time(std::string_view s, std::string_view line, std::uint64_t line_no) const {
    if (s.empty()) return -1;
    auto bad = [&](const char* why) {
      fail_row(line, line_no, fmt::format("time `{}` {} (expected HH:MM:SS.micro)", s, why));
    };
    auto two = [&](std::size_t at) -> int {
      if (at + 2 > s.size() || s[at] < '0' || s[at] > '9' || s[at + 1] < '0' || s[at + 1] > '9')
        bad("is malformed");
      return (s[at] - '0') * 10 + (s[at + 1] - '0');
    };
    if (s.size() < 8 || s[2] != ':' || s[5] != ':') bad("is malformed");
    const int h = two(0), m = two(3), sec = two(6);
    if (h > 23 || m > 59 || sec > 60) bad("is out of range");
    std::int64_t micro = 0;
    if (s.size() > 8) {
      if (s[8] != '.' || s.size() == 9 || s.size() > 18) bad("has a malformed fraction");
      std::int64_t scale = 100000;
      for (std::size_t i = 9; i < s.size(); ++i) {
        if (s[i] < '0' || s[i] > '9') bad("has a malformed fraction");
        micro += (s[i] - '0') * scale;  // digits past the sixth fall below 1 us: scale reaches 0
        scale /= 10;
      }
    }
    return ((static_cast<std::int64_t>(h) * 60 + m) * 60 + sec) * 1000000 + micro;
  }

  trace_action parse_action(std::string_view s, std::string_view line, std::uint64_t line_no) const {
    if (s == "allocate") return trace_action::allocate;
    if (s == "free") return trace_action::free;
    if (s == "allocate failure") return trace_action::allocate_failure;
    fail_row(line, line_no,
             fmt::format("unknown action `{}` (expected allocate, free, allocate failure, capture_begin or "
                         "capture_end)", s));
  }

  // A free names a live pointer; an allocate does not hand out a pointer still live. A null
  // pointer is what a zero-byte request returns, so it is never tracked and its free is a no-op
  // (as deallocate(nullptr) is). `allocate failure` rows make nothing live.
  void check_semantics(const trace_record& r, std::uint64_t line_no) {
    if (r.action == trace_action::allocate_failure) return;
    if (r.action == trace_action::allocate) {
      if (r.pointer == 0) {
        if (r.size != 0)
          fail(line_no, fmt::format("allocate of {} bytes returned a null pointer (a failed request "
                                    "is an `allocate failure` row)", r.size));
        return;
      }
      auto [it, inserted] = live_.try_emplace(r.pointer);
      if (!inserted && it->second.live)
        fail(line_no, fmt::format("allocate returned 0x{:x}, which is still live (allocated at line "
                                  "{} and not freed since)", r.pointer, it->second.line));
      it->second = {true, r.size, line_no};
      return;
    }
    if (r.pointer == 0) return;
    auto it = live_.find(r.pointer);
    if (it == live_.end())
      fail(line_no, fmt::format("free of 0x{:x}, which was never allocated", r.pointer));
    if (!it->second.live)
      fail(line_no, fmt::format("free of 0x{:x}, which is not live (already freed at line {})",
                                r.pointer, it->second.line));
    if (it->second.size != r.size)
      fail(line_no, fmt::format("free of 0x{:x} names {} bytes, but it was allocated with {} bytes "
                                "at line {}", r.pointer, r.size, it->second.size, it->second.line));
    it->second = {false, r.size, line_no};
  }

  std::string_view text_;
  std::string name_;
  std::unordered_map<std::uint64_t, pointer_state> live_;
};

}  // namespace

trace read_trace(const std::filesystem::path& path) {
  const std::string bytes = detail::load_trace_bytes(path);
  return parser(bytes, path.string()).run();
}

trace parse_trace(std::istream& in, const std::string& name) {
  const std::string bytes = detail::load_trace_bytes(in, name);
  return parser(bytes, name).run();
}

}  // namespace gpumem
