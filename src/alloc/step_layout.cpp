// The greedy layout (step_layout.hpp).
#include "step_layout.hpp"

#include <algorithm>

namespace gpumem::detail {

std::size_t greedy_layout(const std::vector<timed_span>& when, const std::vector<planned_entry>& blocks,
                          const std::vector<std::uint32_t>& planned, std::uint64_t period,
                          std::vector<std::size_t>& best_offset) {
  const std::size_t n = blocks.size();
  // Time is cut into buckets so a block meets only the placed blocks of the buckets its span covers.
  const std::uint64_t bucket_ticks = std::max<std::uint64_t>(1, period / 512 + 1);
  const std::size_t buckets = static_cast<std::size_t>(period / bucket_ticks) + 2;
  auto each_bucket = [&](const timed_span& w, auto&& f) {
    for (std::uint64_t b = w.s0 / bucket_ticks; b * bucket_ticks < w.e0; ++b) f(static_cast<std::size_t>(b));
    if (w.s1 != w.e1)
      for (std::uint64_t b = w.s1 / bucket_ticks; b * bucket_ticks < w.e1; ++b) f(static_cast<std::size_t>(b));
  };
  best_offset.assign(n, SIZE_MAX);
  std::size_t best_extent = SIZE_MAX;
  std::vector<std::size_t> offset(n, SIZE_MAX);
  std::vector<std::vector<std::uint32_t>> in_bucket(buckets);
  std::vector<std::uint32_t> stamp(n, UINT32_MAX);
  std::vector<std::pair<std::size_t, std::size_t>> busy;
  auto length = [&](std::uint32_t i) { return (when[i].e0 - when[i].s0) + (when[i].e1 - when[i].s1); };
  for (int order = 0; order < 3; ++order) {
    std::vector<std::uint32_t> seq = planned;
    auto weight = [&](std::uint32_t i) -> double {
      if (order == 0) return double(blocks[i].size);
      if (order == 1) return double(length(i));
      return double(blocks[i].size) * double(length(i));
    };
    std::stable_sort(seq.begin(), seq.end(), [&](std::uint32_t x, std::uint32_t y) { return weight(x) > weight(y); });
    for (auto& b : in_bucket) b.clear();
    std::fill(stamp.begin(), stamp.end(), UINT32_MAX);
    std::size_t extent = 0;
    for (std::uint32_t q = 0; q < seq.size(); ++q) {
      const std::uint32_t i = seq[q];
      busy.clear();
      each_bucket(when[i], [&](std::size_t b) {
        for (std::uint32_t j : in_bucket[b]) {
          if (stamp[j] == q) continue;
          stamp[j] = q;
          if (when[i].meets(when[j])) busy.push_back({offset[j], offset[j] + blocks[j].size});
        }
      });
      std::sort(busy.begin(), busy.end());
      const std::size_t size = blocks[i].size, align = std::size_t{1} << blocks[i].align_log2;
      std::size_t pos = 0, at = SIZE_MAX, gap = SIZE_MAX;
      for (auto [lo, hi] : busy) {
        const std::size_t from = align_up(pos, align);
        if (lo > from && lo - from >= size && lo - pos < gap) gap = lo - pos, at = from;
        pos = std::max(pos, hi);
      }
      offset[i] = at != SIZE_MAX ? at : align_up(pos, align);
      extent = std::max(extent, offset[i] + size);
      each_bucket(when[i], [&](std::size_t b) { in_bucket[b].push_back(i); });
    }
    if (extent < best_extent) best_extent = extent, best_offset = offset;
  }
  return planned.empty() ? 0 : best_extent;
}

}  // namespace gpumem::detail
