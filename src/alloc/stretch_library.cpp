// The stretch library (stretch_library.hpp): recording cut at quiet moments, laying a stretch out,
// keeping and finding layouts.
#include "stretch_library.hpp"

#include <algorithm>
#include <bit>

#include "unit_grid_layout.hpp"

namespace gpumem::detail {

bool stretch_library::record_alloc(std::uintptr_t a, std::size_t size, std::size_t alignment, stream_ref s) {
  const bool opens = live_.empty();
  if (opens) {
    rec_.clear();
    tick_ = 0;
    overflowed_ = false;
  }
  ++tick_;
  // An address recorded live again: its free went by another path; it ended before now.
  if (const auto it = live_.find(a); it != live_.end() && it->second != UINT32_MAX) rec_[it->second].end = tick_;
  if (rec_.size() >= max_requests) {
    overflowed_ = true;  // still followed to its end, to know when the job is quiet again
    live_[a] = UINT32_MAX;
    return opens;
  }
  live_[a] = static_cast<std::uint32_t>(rec_.size());
  rec_.push_back({size, static_cast<std::uint8_t>(std::countr_zero(alignment)), s, tick_, UINT64_MAX});
  return opens;
}

bool stretch_library::record_free(std::uintptr_t a) {
  const auto it = live_.find(a);
  if (it == live_.end()) return false;
  ++tick_;
  if (it->second != UINT32_MAX) rec_[it->second].end = tick_;
  live_.erase(it);
  return live_.empty();
}

void stretch_library::forget_recording() {
  rec_.clear();
  live_.clear();
  tick_ = 0;
  overflowed_ = false;
}

bool stretch_library::keep(double most_bytes) {
  if (overflowed_ || rec_.size() < min_requests || !live_.empty()) return false;
  const stream_ref s = rec_[0].stream;
  // The same requests as a kept stretch: that layout stands (laying out again may search again).
  auto same = [&](const kept_stretch& k) {
    return k.stream == s && k.entries.size() == rec_.size() &&
           std::equal(rec_.begin(), rec_.end(), k.entries.begin(), [](const recorded& x, const planned_entry& y) {
             return x.size == y.size && x.align_log2 == y.align_log2 && x.stream == y.stream;
           });
  };
  if (const auto it = std::find_if(kept_.begin(), kept_.end(), same); it != kept_.end()) {
    it->used = ++clock_;
    return true;
  }
  std::uint64_t requests = hash_start;
  for (const recorded& r : rec_) hash_into(requests, r.size), hash_into(requests, r.align_log2), hash_into(requests, r.stream.value());
  if (refused_.has(requests, most_bytes)) return false;
  std::vector<timed_span> when;
  std::vector<planned_entry> blocks;
  std::vector<std::uint32_t> planned;  // the blocks on the first request's stream
  for (const recorded& r : rec_) {
    if (r.stream == s) planned.push_back(static_cast<std::uint32_t>(blocks.size()));
    when.push_back({r.start, std::min(r.end, tick_), 0, 0});
    blocks.push_back({r.size, r.align_log2, r.stream, SIZE_MAX});
  }
  std::vector<std::size_t> offset;
  std::size_t extent = greedy_layout(when, blocks, planned, tick_ + 1, offset);
  if (static_cast<double>(extent) > most_bytes) {
    std::vector<timed_block> timed;
    for (std::uint32_t i : planned) timed.push_back({when[i].s0, when[i].e0, blocks[i].size});
    std::uint64_t steps_left = search_steps;
    std::vector<std::size_t> at;
    if (const std::size_t found = tightest_unit_grid_layout(timed, static_cast<std::size_t>(most_bytes) + 1, steps_left, at)) {
      for (std::size_t k = 0; k < planned.size(); ++k) offset[planned[k]] = at[k];
      extent = found;
    }
  }
  if (!extent || static_cast<double>(extent) > most_bytes) {
    refused_.add(requests, most_bytes);
    return false;
  }
  for (std::size_t i = 0; i < blocks.size(); ++i) blocks[i].offset = offset[i];
  // Room made by the one used longest ago.
  auto slot = kept_.size() < max_kept ? kept_.emplace(kept_.end())
                                      : std::min_element(kept_.begin(), kept_.end(), [](const kept_stretch& x, const kept_stretch& y) {
                                          return x.used < y.used;
                                        });
  *slot = {std::move(blocks), extent, s, ++clock_, ++clock_, 0, 0};
  return true;
}

const kept_stretch* stretch_library::find(std::size_t size, std::size_t alignment, stream_ref s) {
  const auto align_log2 = static_cast<std::uint8_t>(std::countr_zero(alignment));
  kept_stretch* best = nullptr;
  for (kept_stretch& k : kept_) {
    const planned_entry& e = k.entries.front();
    if (e.size != size || e.align_log2 != align_log2 || e.stream != s || e.offset == SIZE_MAX) continue;
    if (k.pass_over) {
      --k.pass_over;
      continue;
    }
    if (!best || k.used > best->used) best = &k;
  }
  if (best) best->used = ++clock_;
  return best;
}

void stretch_library::judge(std::uint64_t id, bool right) {
  for (kept_stretch& k : kept_) {
    if (k.id != id) continue;
    if (right) {
      k.wrong = 0;
    } else {
      k.pass_over = std::uint32_t{1} << std::min<std::uint32_t>(k.wrong, 10);
      ++k.wrong;
    }
  }
}

}  // namespace gpumem::detail
