// One pass over a trace's rows, keeping the live set (pointer -> size, stream, row) to see which
// frees cross streams, what is live at the peak and what is never freed.
#include "trace_profile.hpp"

#include <algorithm>
#include <unordered_map>

namespace gpumem::detail {
namespace {

constexpr std::int64_t day_us = std::int64_t{86400} * 1000000;

struct live_block {
  std::uint64_t size;
  std::uint64_t stream;
  std::size_t row;
};

std::uint64_t rounding(std::uint64_t size, std::uint64_t alignment) {
  const std::uint64_t rest = size % alignment;
  return rest == 0 ? 0 : alignment - rest;
}

// Bytes live right after row `peak` that are later freed on another stream than their allocating
// one (0 when `peak` is past the end).
std::uint64_t cross_stream_at(const trace& t, std::size_t peak) {
  if (peak >= t.records.size()) return 0;
  std::unordered_map<std::uint64_t, live_block> live;
  for (std::size_t i = 0; i <= peak; ++i) {
    const trace_record& r = t.records[i];
    if (r.action == trace_action::allocate && r.pointer != 0)
      live[r.pointer] = {r.size, r.stream, i};
    else if (r.action == trace_action::free)
      live.erase(r.pointer);
  }
  std::uint64_t bytes = 0;
  for (std::size_t i = peak + 1; i < t.records.size() && !live.empty(); ++i) {
    const trace_record& r = t.records[i];
    if (r.action != trace_action::free) continue;
    auto it = live.find(r.pointer);
    if (it == live.end()) continue;
    if (it->second.stream != r.stream) bytes += it->second.size;
    live.erase(it);
  }
  return bytes;
}

}  // namespace

trace_profile profile_trace(const trace& t, std::uint64_t small_bytes, std::uint64_t alignment,
                            std::size_t top_n) {
  trace_profile p;
  p.rows = t.records.size();
  p.timed = !t.records.empty();
  for (const auto& r : t.records) p.timed = p.timed && r.time_us >= 0;

  std::unordered_map<std::uint64_t, live_block> live;
  live.reserve(4096);
  std::unordered_map<std::uint64_t, std::uint64_t> size_counts;
  std::uint64_t live_bytes = 0;
  std::uint64_t live_rounding = 0;
  double live_area = 0.0;     // sum of live bytes x microseconds
  double live_row_sum = 0.0;  // sum of live bytes after each row
  std::int64_t elapsed_us = 0;
  std::size_t peak_row = t.records.size();  // the row that reached peak live
  auto line_of = [&](std::size_t i) { return i < t.lines.size() ? t.lines[i] : i + 2; };

  for (std::size_t i = 0; i < t.records.size(); ++i) {
    const trace_record& r = t.records[i];
    if (p.timed && i > 0) {
      std::int64_t dt = r.time_us - t.records[i - 1].time_us;
      if (dt < 0) dt += day_us;  // the wall clock passed midnight
      live_area += static_cast<double>(live_bytes) * static_cast<double>(dt);
      elapsed_us += dt;
    }
    switch (r.action) {
      case trace_action::allocate_failure:
        ++p.failures;
        p.largest_failed_bytes = std::max(p.largest_failed_bytes, r.size);
        if (p.first_failure_line == 0) p.first_failure_line = line_of(i);
        break;
      case trace_action::allocate:
        ++p.allocations;
        ++size_counts[r.size];
        p.small_allocations += r.size < small_bytes;
        if (r.size % alignment != 0) ++p.unaligned_allocations;
        p.rounding_bytes_total += rounding(r.size, alignment);
        if (r.pointer != 0) {
          live[r.pointer] = {r.size, r.stream, i};
          live_bytes += r.size;
          live_rounding += rounding(r.size, alignment);
          if (live_bytes > p.peak_live_bytes) {
            p.peak_live_bytes = live_bytes;
            p.peak_line = line_of(i);
            p.rounding_bytes_at_peak = live_rounding;
            peak_row = i;
          }
          p.peak_aligned_live_bytes = std::max(p.peak_aligned_live_bytes, live_bytes + live_rounding);
        }
        break;
      case trace_action::free: {
        ++p.frees;
        auto it = live.find(r.pointer);
        if (it == live.end()) break;  // a null free; read_trace rejects any other unknown pointer
        if (it->second.stream != r.stream) {
          ++p.cross_stream_frees;
          p.cross_stream_bytes += it->second.size;
        }
        live_bytes -= it->second.size;
        live_rounding -= rounding(it->second.size, alignment);
        live.erase(it);
        break;
      }
    }
    live_row_sum += static_cast<double>(live_bytes);
  }

  p.duration_seconds = static_cast<double>(elapsed_us) / 1e6;
  if (elapsed_us > 0) {
    p.mean_live_bytes = live_area / static_cast<double>(elapsed_us);
    p.mean_time_weighted = true;
  } else if (p.rows > 0) {
    p.mean_live_bytes = live_row_sum / static_cast<double>(p.rows);
  }

  std::size_t first_row = t.records.size(), last_row = 0;
  for (const auto& [ptr, b] : live) {
    ++p.leaked_allocations;
    p.leaked_bytes += b.size;
    p.largest_leak_bytes = std::max(p.largest_leak_bytes, b.size);
    first_row = std::min(first_row, b.row);
    last_row = std::max(last_row, b.row);
  }
  if (p.leaked_allocations > 0) {
    p.first_leak_line = line_of(first_row);
    p.last_leak_line = line_of(last_row);
    p.leak_span_share = static_cast<double>(last_row - first_row) / static_cast<double>(p.rows);
  }

  p.cross_stream_bytes_at_peak = cross_stream_at(t, peak_row);

  p.top_sizes.assign(size_counts.begin(), size_counts.end());
  const std::size_t n = std::min(top_n, p.top_sizes.size());
  std::partial_sort(p.top_sizes.begin(), p.top_sizes.begin() + static_cast<std::ptrdiff_t>(n),
                    p.top_sizes.end(), [](const auto& a, const auto& b) {
                      return a.second != b.second ? a.second > b.second : a.first < b.first;
                    });
  p.top_sizes.resize(n);
  return p;
}

}  // namespace gpumem::detail
