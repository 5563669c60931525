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
  waiting_.clear();  // (its count from the step's boundary goes with the recording)
  rec_.clear();
  rec_live_.clear();
  matched_ = 0;
  boundary_ = none;
  pending_ = 0;
  since_boundary_ = 0;
}

void step_plan::record_alloc(std::uintptr_t a, std::size_t size, std::size_t alignment, stream_ref s) {
  if (!recording()) return;
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

std::uint64_t step_plan::step_signature() const noexcept {
  std::uint64_t h = hash_start;
  const std::uint64_t from = boundary_ == none || rec_.empty() ? 0 : rec_[0].start;
  for (std::size_t i = 0; i < step_requests(); ++i) {
    const recorded& r = rec_[i];
    hash_into(h, r.size), hash_into(h, r.align_log2), hash_into(h, r.stream.value()), hash_into(h, r.start - from);
    hash_into(h, r.end == UINT64_MAX ? UINT64_MAX : r.end - from);
  }
  return h;
}

void step_plan::record_free(std::uintptr_t a) {
  if (!recording()) return;
  auto it = rec_live_.find(a);
  if (it == rec_live_.end()) return;
  ++tick_;
  recorded& r = rec_[it->second];
  r.end = tick_;
  if (boundary_ != none && it->second < boundary_ && pending_) --pending_;
  rec_live_.erase(it);
  if (boundary_ != none) stop_waiting_after_a_step();
}


std::size_t step_plan::lay_out(std::size_t& peak) {
  const std::size_t n = boundary_;
  const std::uint64_t period = boundary_tick_;
  const stream_ref s = rec_[0].stream;
  std::vector<timed_span> when(n);
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
  std::vector<planned_entry> blocks;
  blocks.reserve(n);
  for (std::size_t i = 0; i < n; ++i) blocks.push_back({rec_[i].size, rec_[i].align_log2, rec_[i].stream, 0});
  std::vector<std::size_t> best_offset;
  const std::size_t best_extent = greedy_layout(when, blocks, planned, period, best_offset);
  for (std::size_t i = 0; i < n; ++i) blocks[i].offset = best_offset[i];
  entries_ = std::move(blocks);
  stream_ = s;
  phase_ = phase::laid_out;
  return best_extent;
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
  next_ = once_ ? 0 : static_cast<std::uint32_t>(install_at_);
  round_misses_ = streak_ = 0;
  if (!once_) forget_recording();  // (a stretch's requests are recorded on: the step may span it)
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
  if (once_ && live_.empty() && w != 0) {
    // Nothing of the stretch is live and this is not its next request: it is over.
    drop();
    return 0;
  }
  if (w == window || w == n) {
    miss();
    const std::uintptr_t a = place_in_gap(size, alignment, s);
    if (once_ && a) record_alloc(a, size, alignment, s);
    return a;
  }
  const std::uint32_t c = (next_ + w) % n;
  if (next_ + w >= n) round_misses_ = 0;  // the plan came round
  next_ = (c + 1) % n;
  const std::uintptr_t a = place_entry(entries_[c], size, alignment, s);
  if (once_ && next_ == 0) drop();  // a stretch's last request: the region goes back once it is freed
  if (once_ && a) record_alloc(a, size, alignment, s);
  return a;
}

std::uintptr_t step_plan::place_entry(const entry& e, std::size_t size, std::size_t alignment, stream_ref s) {
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

void step_plan::follow_once(const std::vector<entry>& entries, stream_ref s) {
  if (phase_ == phase::laid_out) waiting_ = std::move(entries_), waiting_stream_ = stream_;
  entries_ = entries;
  stream_ = s;
  once_ = true;
  phase_ = phase::laid_out;
}

void step_plan::unfollow() {
  if (!once_ || phase_ != phase::laid_out) return;
  once_ = false;
  resume_waiting_step();
}

void step_plan::resume_waiting_step() {
  entries_ = std::move(waiting_);
  waiting_.clear();
  phase_ = entries_.empty() ? phase::recording : phase::laid_out;
  if (phase_ == phase::laid_out) stream_ = waiting_stream_;
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
  if (once_) record_free(a);
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
  if (once_) {
    once_ = false;
    resume_waiting_step();
  } else {
    restart();
  }
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
