// The step plan's recording, layout and following (step_plan.hpp says what each is for).
#include "step_plan.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <bit>
#include <stdexcept>

namespace gpumem::detail {

void step_plan::restart() {
  if (phase_ == phase::laid_out) phase_ = phase::recording, entries_.clear();
  forget_recording();
}

void step_plan::forget_recording() {
  rec_.clear();
  rec_live_.clear();
  matched_ = 0;
  boundary_ = none;
  pending_ = 0;
  since_boundary_ = 0;
}

void step_plan::record_alloc(std::uintptr_t a, std::size_t size, std::size_t alignment, stream_ref s) {
  if (phase_ != phase::recording) return;
  ++tick_;
  if (boundary_ != none) {
    // The next step has begun; its requests are only counted, to know where following starts.
    ++since_boundary_;
    stop_waiting_after_a_step();
    return;
  }
  if (rec_.size() >= max_recorded) restart();
  const auto k = static_cast<std::uint32_t>(rec_.size());
  rec_.push_back({size, static_cast<std::uint8_t>(std::countr_zero(alignment)), s, tick_, UINT64_MAX});
  rec_live_[a] = k;
  if (k + 1 == match_len) {
    // The recording's first match_len requests are what must come again: their failure function
    // (Knuth-Morris-Pratt), so a step whose start repeats within itself (decode steps) is found.
    fail_[0] = 0;
    for (std::size_t i = 1, f = 0; i < match_len; ++i) {
      while (f && !same(rec_[i], rec_[f])) f = fail_[f - 1];
      if (same(rec_[i], rec_[f])) ++f;
      fail_[i] = static_cast<std::uint8_t>(f);
    }
    matched_ = 0;
    return;
  }
  if (k < match_len) return;
  while (matched_ && !same(rec_[k], rec_[matched_])) matched_ = fail_[matched_ - 1];
  if (same(rec_[k], rec_[matched_])) ++matched_;
  if (matched_ < match_len) return;
  // A repeat that starts before min_step is a short period (a layer, a pair): not a step.
  if (k + 1 - match_len >= min_step) return step_found(k + 1 - match_len);
  matched_ = fail_[match_len - 1];
}

void step_plan::step_found(std::size_t boundary) {
  boundary_ = boundary;
  boundary_tick_ = rec_[boundary].start - 1;  // ticks of one step: those before its first request
  since_boundary_ = rec_.size() - boundary;
  pending_ = 0;
  for (std::size_t i = 0; i < boundary; ++i) pending_ += rec_[i].end == UINT64_MAX;
}

// Blocks of the step still live a whole step after its end are taken as live for good.
void step_plan::stop_waiting_after_a_step() noexcept {
  if (tick_ - boundary_tick_ > boundary_tick_) pending_ = 0;
}

void step_plan::record_free(std::uintptr_t a) {
  if (phase_ != phase::recording) return;
  auto it = rec_live_.find(a);
  if (it == rec_live_.end()) return;
  ++tick_;
  recorded& r = rec_[it->second];
  r.end = tick_;
  if (boundary_ != none && it->second < boundary_ && pending_) --pending_;
  rec_live_.erase(it);
  if (boundary_ != none) stop_waiting_after_a_step();
}

namespace {
// A block's time in the step: one interval, or two where it lives past the step's end and into
// the next step's start.
struct span {
  std::uint64_t s0, e0, s1, e1;  // [s0, e0) and [s1, e1); the second empty when s1 == e1
  bool meets(const span& o) const noexcept {
    auto cut = [](std::uint64_t a, std::uint64_t b, std::uint64_t c, std::uint64_t d) { return a < d && c < b; };
    return cut(s0, e0, o.s0, o.e0) || cut(s0, e0, o.s1, o.e1) || cut(s1, e1, o.s0, o.e0) || cut(s1, e1, o.s1, o.e1);
  }
};
}  // namespace

std::size_t step_plan::lay_out(std::size_t& peak) {
  const std::size_t n = boundary_;
  const std::uint64_t period = boundary_tick_;
  const stream_ref s = rec_[0].stream;
  std::vector<span> when(n);
  std::vector<std::uint32_t> planned;  // the blocks on the plan's stream
  for (std::size_t i = 0; i < n; ++i) {
    const recorded& r = rec_[i];
    const std::uint64_t start = r.start - 1, end = r.end == UINT64_MAX ? UINT64_MAX : r.end - 1;
    if (end <= period)
      when[i] = {start, end, 0, 0};
    else if (end == UINT64_MAX || end - period >= start)
      when[i] = {0, period, 0, 0};  // live a whole step or more
    else
      when[i] = {start, period, 0, end - period};
    if (r.stream == s) planned.push_back(static_cast<std::uint32_t>(i));
  }
  // Peak live bytes of the planned blocks over one step, the wrapped parts included.
  {
    std::vector<std::int64_t> diff(period + 2, 0);
    for (std::uint32_t i : planned) {
      const auto sz = static_cast<std::int64_t>(rec_[i].size);
      diff[when[i].s0] += sz, diff[when[i].e0] -= sz;
      if (when[i].s1 != when[i].e1) diff[when[i].s1] += sz, diff[when[i].e1] -= sz;
    }
    std::vector<std::int64_t> live(period + 1, 0);
    std::int64_t cur = 0, top = 0;
    for (std::uint64_t t = 0; t <= period; ++t) top = std::max(top, live[t] = cur += diff[t]);
    peak = static_cast<std::size_t>(top);
    // Where the region is taken: before the request at which the fewest planned bytes are live,
    // so the blocks the arena placed in the step in progress take the least room beside it.
    install_at_ = 0;
    std::int64_t least = INT64_MAX;
    for (std::uint32_t i : planned) {
      const std::uint64_t t = rec_[i].start - 1;
      const std::int64_t before = live[t] - static_cast<std::int64_t>(rec_[i].size);
      if (before < least) least = before, install_at_ = i;
    }
  }
  // Greedy placement, best-fit gaps, in three orders; the smallest extent wins. Time is cut into
  // buckets so a block meets only the placed blocks of the buckets its span covers.
  const std::uint64_t bucket_ticks = std::max<std::uint64_t>(1, period / 512 + 1);
  const std::size_t buckets = static_cast<std::size_t>(period / bucket_ticks) + 2;
  auto each_bucket = [&](const span& w, auto&& f) {
    for (std::uint64_t b = w.s0 / bucket_ticks; b * bucket_ticks < w.e0; ++b) f(static_cast<std::size_t>(b));
    if (w.s1 != w.e1)
      for (std::uint64_t b = w.s1 / bucket_ticks; b * bucket_ticks < w.e1; ++b) f(static_cast<std::size_t>(b));
  };
  std::vector<std::size_t> best_offset;
  std::size_t best_extent = SIZE_MAX;
  std::vector<std::size_t> offset(n, SIZE_MAX);
  std::vector<std::vector<std::uint32_t>> in_bucket(buckets);
  std::vector<std::uint32_t> stamp(n, UINT32_MAX);
  std::vector<std::pair<std::size_t, std::size_t>> busy;
  auto length = [&](std::uint32_t i) { return (when[i].e0 - when[i].s0) + (when[i].e1 - when[i].s1); };
  for (int order = 0; order < 3; ++order) {
    std::vector<std::uint32_t> seq = planned;
    auto weight = [&](std::uint32_t i) -> double {
      if (order == 0) return double(rec_[i].size);
      if (order == 1) return double(length(i));
      return double(rec_[i].size) * double(length(i));
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
          if (when[i].meets(when[j])) busy.push_back({offset[j], offset[j] + rec_[j].size});
        }
      });
      std::sort(busy.begin(), busy.end());
      const std::size_t size = rec_[i].size, align = std::size_t{1} << rec_[i].align_log2;
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
  entries_.clear();
  entries_.reserve(n);
  for (std::size_t i = 0; i < n; ++i) {
    const bool mine = rec_[i].stream == s;
    entries_.push_back({rec_[i].size, rec_[i].align_log2, rec_[i].stream, mine ? best_offset[i] : SIZE_MAX});
  }
  stream_ = s;
  phase_ = phase::laid_out;
  return planned.empty() ? 0 : best_extent;
}

std::size_t step_plan::extent_planned() const noexcept {
  std::size_t extent = 0;
  for (const entry& e : entries_)
    if (e.offset != SIZE_MAX) extent = std::max(extent, e.offset + e.size);
  return extent;
}

void step_plan::install(std::uintptr_t base) {
  base_ = base;
  extent_ = extent_planned();
  next_ = static_cast<std::uint32_t>(install_at_);
  round_misses_ = streak_ = 0;
  forget_recording();
  phase_ = phase::following;
  ++plans_;
}

void step_plan::miss() {
  ++misses_;
  ++streak_;
  if (++round_misses_ > entries_.size() / 4 + window || streak_ > 4 * window + min_step) drop();
}

std::uintptr_t step_plan::place(std::size_t size, std::size_t alignment, stream_ref s) {
  if (phase_ != phase::following) return 0;
  const auto align_log2 = static_cast<std::uint8_t>(std::countr_zero(alignment));
  const auto n = static_cast<std::uint32_t>(entries_.size());
  std::uint32_t w = 0;
  for (; w < window && w < n; ++w) {
    const entry& e = entries_[(next_ + w) % n];
    if (e.size == size && e.align_log2 == align_log2 && e.stream == s) break;
  }
  if (w == window || w == n) {
    miss();
    return place_in_gap(size, alignment, s);
  }
  const std::uint32_t c = (next_ + w) % n;
  if (next_ + w >= n) round_misses_ = 0;  // the plan came round
  next_ = (c + 1) % n;
  const entry& e = entries_[c];
  if (e.offset == SIZE_MAX) return 0;  // another stream's request: the arena's
  auto it = std::lower_bound(live_.begin(), live_.end(), e.offset,
                             [](const placed& p, std::size_t off) { return p.offset < off; });
  if ((it != live_.end() && it->offset < e.offset + e.size) || (it != live_.begin() && std::prev(it)->end > e.offset)) {
    miss();  // a block of the last step, or one placed out of order, still holds it
    return place_in_gap(size, alignment, s);
  }
  live_.insert(it, {e.offset, e.offset + e.size, false});
  ++hits_;
  streak_ = 0;
  return base_ + e.offset;
}

// A loop that runs longer than it did in the recorded step, a shape the step did not have: the
// region is mapped already, and the arena would map more beside it, past the ceiling the region
// was sized to. A later request whose planned place such a block holds misses the same way.
std::uintptr_t step_plan::place_in_gap(std::size_t size, std::size_t alignment, stream_ref s) {
  // (miss() may have dropped the plan.) Only on the plan's stream: the region's memory passes from
  // block to block without events in that stream's order alone.
  if (phase_ != phase::following || s != stream_) return 0;
  std::size_t pos = 0;
  for (auto it = live_.begin();; ++it) {
    const std::size_t from = align_up(pos, alignment), lo = it == live_.end() ? extent_ : it->offset;
    if (lo >= from && lo - from >= size) {
      live_.insert(it, {from, from + size, false});
      return base_ + from;
    }
    if (it == live_.end()) return 0;
    pos = std::max(pos, it->end);
  }
}

bool step_plan::release(std::uintptr_t a, stream_ref s, const std::vector<stream_ref>& also) {
  const std::size_t off = a - base_;
  auto it = std::lower_bound(live_.begin(), live_.end(), off,
                             [](const placed& p, std::size_t o) { return p.offset < o; });
  if (it == live_.end() || it->offset != off)
    throw std::logic_error(fmt::format("step_plan::release: no planned block at {:#x}", a));
  bool foreign = s != stream_;
  for (stream_ref u : also) foreign |= u != stream_;
  if (!foreign) {
    live_.erase(it);
    return drained();
  }
  // Other streams may still use it: the place stays taken until the whole region goes back,
  // freed on them as well.
  auto note = [&](stream_ref u) {
    if (u != stream_ && std::find(others_.begin(), others_.end(), u) == others_.end()) others_.push_back(u);
  };
  note(s);
  for (stream_ref u : also) note(u);
  if (!it->poisoned) it->poisoned = true, ++poisoned_;
  drop();
  return drained();
}

void step_plan::drop() {
  if (phase_ == phase::following) {
    phase_ = phase::draining;
  } else if (phase_ == phase::recording || phase_ == phase::laid_out) {
    restart();  // (a laid-out plan goes back to recording there)
  }
}

void step_plan::region_returned() {
  base_ = 0;
  extent_ = 0;
  entries_.clear();
  live_.clear();
  poisoned_ = 0;
  others_.clear();
  phase_ = phase::recording;
  restart();
}

void step_plan::check() const {
  std::size_t poisoned = 0, prev_end = 0;
  for (const placed& p : live_) {
    if (p.offset < prev_end) throw std::logic_error(fmt::format("step_plan: planned blocks overlap at offset {}", p.offset));
    if (p.end > extent_) throw std::logic_error(fmt::format("step_plan: a planned block leaves the region at offset {}", p.offset));
    prev_end = p.end;
    poisoned += p.poisoned;
  }
  if (poisoned != poisoned_) throw std::logic_error("step_plan: the count of places kept for other streams is off");
  if (phase_ == phase::recording && !live_.empty()) throw std::logic_error("step_plan: recording with planned blocks live");
}

}  // namespace gpumem::detail
