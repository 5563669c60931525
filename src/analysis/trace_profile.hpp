#pragma once
// The figures of a trace, gathered in one pass: what the doctor's findings are judged on. Kept
// apart from the judging (doctor.cpp) so the arithmetic is tested on its own terms.
#include <cstdint>
#include <utility>
#include <vector>

#include "gpumem/trace.hpp"

namespace gpumem::detail {

struct trace_profile {
  std::uint64_t rows = 0;
  std::uint64_t allocations = 0;
  std::uint64_t frees = 0;

  std::uint64_t failures = 0;
  std::uint64_t largest_failed_bytes = 0;
  std::uint64_t first_failure_line = 0;

  bool timed = false;               // every row has a time, so wall-clock rates mean something
  double duration_seconds = 0.0;    // first to last row; a clock that passes midnight wraps

  std::uint64_t small_allocations = 0;          // size < small_bytes
  std::uint64_t cross_stream_frees = 0;
  std::uint64_t cross_stream_bytes = 0;
  std::uint64_t cross_stream_bytes_at_peak = 0;  // live at peak live, later freed on another stream
  std::uint64_t unaligned_allocations = 0;      // size % alignment != 0
  std::uint64_t rounding_bytes_total = 0;       // over every allocation
  std::uint64_t rounding_bytes_at_peak = 0;     // of what was live at peak live

  std::uint64_t peak_live_bytes = 0;
  std::uint64_t peak_line = 0;
  // The peak of live bytes with each request rounded up to `alignment`: what any allocator that
  // aligns its blocks must hold at once.
  std::uint64_t peak_aligned_live_bytes = 0;
  double mean_live_bytes = 0.0;     // time-weighted when `timed` and the trace spans time
  bool mean_time_weighted = false;

  std::uint64_t leaked_allocations = 0;         // live at the end
  std::uint64_t leaked_bytes = 0;
  std::uint64_t largest_leak_bytes = 0;
  std::uint64_t first_leak_line = 0;
  std::uint64_t last_leak_line = 0;
  double leak_span_share = 0.0;     // rows between first and last leaked allocation / rows

  // The most frequent allocation sizes, most frequent first (ties: smaller size first).
  std::vector<std::pair<std::uint64_t, std::uint64_t>> top_sizes;  // (size, count)
};

trace_profile profile_trace(const trace& t, std::uint64_t small_bytes, std::uint64_t alignment,
                            std::size_t top_n);

}  // namespace gpumem::detail
