// The trace adaptor's sink: formats rows (the same text as write_trace_record), buffers them under
// one mutex and writes them out in chunks.
#include "gpumem/trace_adaptor.hpp"

#include <atomic>
#include <chrono>
#include <ctime>
#include <fstream>
#include <mutex>
#include <ostream>
#include <stdexcept>
#include <string>

#include <fmt/format.h>

#include "gpumem/detail/trace_format.hpp"

namespace gpumem::detail {

std::uint64_t trace_thread_number() noexcept {
  static std::atomic<std::uint64_t> next{1};
  thread_local const std::uint64_t mine = next.fetch_add(1, std::memory_order_relaxed);
  return mine;
}

namespace {
// The local clock's offset from UTC in seconds, now.
std::int64_t utc_offset_seconds() {
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  if (!localtime_r(&now, &local)) return 0;
  return local.tm_gmtoff;
}
}  // namespace

struct trace_sink::state {
  std::ofstream file;           // when the sink opened the output itself
  std::ostream* out = nullptr;
  trace_adaptor_options opts;
  std::int64_t offset_us = 0;   // local time - UTC
  std::mutex mu;
  std::string buffer;           // guarded by mu
  std::uint64_t rows = 0;       // guarded by mu

  void write_locked() {
    if (!buffer.empty()) {
      out->write(buffer.data(), static_cast<std::streamsize>(buffer.size()));
      buffer.clear();
    }
    if (opts.flush_stream) out->flush();
  }
};

namespace {
void start(trace_sink::state& st) {
  st.offset_us = utc_offset_seconds() * 1000000;
  if (st.opts.buffer_bytes) st.buffer.reserve(st.opts.buffer_bytes + 128);
  write_trace_header(*st.out);
  if (st.opts.flush_stream) st.out->flush();
}
}  // namespace

trace_sink::trace_sink(std::ostream& out, const trace_adaptor_options& opts)
    : st_(std::make_unique<state>()) {
  st_->out = &out;
  st_->opts = opts;
  start(*st_);
}

trace_sink::trace_sink(const std::filesystem::path& path, const trace_adaptor_options& opts)
    : st_(std::make_unique<state>()) {
  st_->file.open(path, std::ios::binary | std::ios::trunc);
  if (!st_->file)
    throw std::runtime_error(fmt::format("trace adaptor: cannot open {} for writing", path.string()));
  st_->out = &st_->file;
  st_->opts = opts;
  start(*st_);
}

trace_sink::~trace_sink() { flush(); }

void trace_sink::record(trace_action a, const void* p, std::size_t bytes, stream_ref s) noexcept {
  trace_record r;
  r.action = a;
  r.pointer = reinterpret_cast<std::uintptr_t>(p);
  r.size = bytes;
  r.stream = s.value();
  write_row(r, [&](fmt::memory_buffer& line) { append_trace_record(line, r); });
}

void trace_sink::record_capture(bool begin, stream_ref s) noexcept {
  trace_record r;
  write_row(r, [&](fmt::memory_buffer& line) { append_capture_record(line, r.thread, r.time_us, begin, s.value()); });
}

// Stamps `r` with the thread and the time, and appends the row `format` writes.
template <class Format>
void trace_sink::write_row(trace_record& r, Format&& format) noexcept {
  try {
    r.thread = trace_thread_number();
    fmt::memory_buffer line;
    std::lock_guard lock(st_->mu);
    // The time is taken under the lock, so rows are in time order in the file.
    const auto now = std::chrono::system_clock::now().time_since_epoch();
    const std::int64_t us = std::chrono::duration_cast<std::chrono::microseconds>(now).count();
    constexpr std::int64_t day_us = std::int64_t{86400} * 1000000;
    r.time_us = ((us + st_->offset_us) % day_us + day_us) % day_us;
    format(line);
    st_->buffer.append(line.data(), line.size());
    ++st_->rows;
    if (st_->buffer.size() >= st_->opts.buffer_bytes) st_->write_locked();
  } catch (...) {
    // A row that cannot be recorded (out of host memory) is lost; the request itself is not.
  }
}

void trace_sink::flush() noexcept {
  try {
    std::lock_guard lock(st_->mu);
    st_->write_locked();
    st_->out->flush();
  } catch (...) {
  }
}

std::uint64_t trace_sink::rows() const noexcept {
  std::lock_guard lock(st_->mu);
  return st_->rows;
}

}  // namespace gpumem::detail
