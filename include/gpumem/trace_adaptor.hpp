#pragma once
// gpumem::trace_adaptor<Upstream> — records every request a resource serves as a trace in RMM's
// log CSV (trace.hpp), the format `gpumem replay`, `doctor` and `report` read:
//
//   Thread,Time,Action,Pointer,Size,Stream
//   1,14:03:07.123456,allocate,0x7f0000200000,4096,0x0
//
// Each allocate, free and allocate failure is one row: Thread is a small stable number per thread
// (1, 2, ... in the order threads first record), Time the local wall clock HH:MM:SS.micro (the
// UTC offset is taken once, at construction), then the pointer, size and stream. An
// out_of_memory from the upstream is written as `allocate failure` with the requested size and
// rethrown; other exceptions pass through unrecorded. A free is written before it is forwarded, so
// another thread can never record an allocate of the same address ahead of it: the file is always
// a valid trace.
//
// Thread safe: under one mutex each row takes its time (so the file is in time order) and is
// appended to a buffer, written to the stream in chunks of `buffer_bytes`; `flush()` and the
// destructor write the rest.
// The stream (or the file the adaptor opened) must outlive the adaptor; the upstream too.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <iosfwd>
#include <memory>

#include "gpumem/core.hpp"
#include "gpumem/errors.hpp"
#include "gpumem/resource.hpp"
#include "gpumem/trace.hpp"

namespace gpumem {

struct trace_adaptor_options {
  // Rows are kept in memory until about this many bytes are buffered; 0 writes every row at once.
  std::size_t buffer_bytes = std::size_t{64} << 10;
  // Also flush the stream itself after each write (slow; for a process that may crash).
  bool flush_stream = false;
};

namespace detail {
// The non-template half: row formatting, the buffer, the lock and the output. In
// src/adaptors/trace_adaptor.cpp.
class trace_sink {
 public:
  trace_sink(std::ostream& out, const trace_adaptor_options& opts);
  // Opens (truncates) `path`; throws std::runtime_error naming it when it cannot.
  trace_sink(const std::filesystem::path& path, const trace_adaptor_options& opts);
  ~trace_sink();
  trace_sink(const trace_sink&) = delete;
  trace_sink& operator=(const trace_sink&) = delete;

  void record(trace_action a, const void* p, std::size_t bytes, stream_ref s) noexcept;
  // A capture_begin (`begin`) or capture_end row: stream `s` starts or stops capturing a CUDA graph.
  void record_capture(bool begin, stream_ref s) noexcept;
  void flush() noexcept;
  std::uint64_t rows() const noexcept;

  struct state;

 private:
  template <class Format>
  void write_row(trace_record& r, Format&& format) noexcept;
  std::unique_ptr<state> st_;
};

// A small number per thread, 1 for the first thread that asks, stable for the thread's life.
std::uint64_t trace_thread_number() noexcept;
}  // namespace detail

template <resource Upstream>
class trace_adaptor {
 public:
  // Writes the header now. `upstream` and `out` are not owned.
  trace_adaptor(Upstream& upstream, std::ostream& out, trace_adaptor_options opts = {})
      : up_(&upstream), sink_(out, opts) {}
  trace_adaptor(Upstream& upstream, const std::filesystem::path& file,
                trace_adaptor_options opts = {})
      : up_(&upstream), sink_(file, opts) {}
  trace_adaptor(const trace_adaptor&) = delete;
  trace_adaptor& operator=(const trace_adaptor&) = delete;

  void* allocate(std::size_t bytes, std::size_t alignment = default_alignment, stream_ref s = {}) {
    void* p = nullptr;
    try {
      p = up_->allocate(bytes, alignment, s);
    } catch (const out_of_memory&) {
      sink_.record(trace_action::allocate_failure, nullptr, bytes, s);
      throw;
    }
    sink_.record(trace_action::allocate, p, bytes, s);
    return p;
  }

  void deallocate(void* p, std::size_t bytes, std::size_t alignment = default_alignment,
                  stream_ref s = {}) noexcept {
    sink_.record(trace_action::free, p, bytes, s);  // before the address can be handed out again
    up_->deallocate(p, bytes, alignment, s);
  }

  // Writes the buffered rows to the stream and flushes it.
  void flush() noexcept { sink_.flush(); }
  std::uint64_t rows() const noexcept { return sink_.rows(); }
  Upstream& upstream() const noexcept { return *up_; }

  bool operator==(const trace_adaptor& o) const noexcept { return this == &o; }

 private:
  Upstream* up_;
  detail::trace_sink sink_;
};

}  // namespace gpumem
