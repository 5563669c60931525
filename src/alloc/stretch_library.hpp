#pragma once
// Stretches: layouts of the quiet-to-quiet stretches of a job, kept for when the same stretch comes
// again (the step plan follows one, step_plan.hpp).
//
// A server's batch, a job's evaluation pass, a generate call: between two moments when no large
// block is live the job asks for a run of large blocks that the same shape of input asks for
// again, though not at a fixed period the step plan's search would find. Online at a tight
// reserve, best fit cannot know which of them will be live together and moves granules to stay
// within the ceiling, the same moves each time the stretch comes. The library records the large
// requests the arena serves, cut at quiet moments; a stretch during which the arena unmapped
// memory is laid out as the step plan lays out a step (greedy, and exactly on a grid of the
// blocks' common unit where greedy is over the ceiling: unit_grid_layout.hpp) and kept, a few at
// a time. When a large request comes at a quiet moment and a kept stretch began with the same
// request, the step plan takes that layout and follows it once.
//
// Not thread-safe: the pool calls it under its own lock.
#include <cstddef>
#include <cstdint>
#include <unordered_map>
#include <vector>

#include "gpumem/core.hpp"
#include "step_layout.hpp"

namespace gpumem::detail {

struct kept_stretch {
  std::vector<planned_entry> entries;
  std::size_t extent = 0;  // the region's bytes
  stream_ref stream{};     // the stream the layout covers (its first request's)
  std::uint64_t used = 0;  // when last kept or taken, for choosing and for eviction
  std::uint64_t id = 0;
  // Takes that went wrong in a row (no room, or more requests missed than followed it), and the
  // matches to pass over before it is taken again: 2^wrong, so a first request shared with other
  // stretches stops taking this one up.
  std::uint32_t wrong = 0, pass_over = 0;
};

class stretch_library {
 public:
  // The most stretches kept; the one used longest ago goes first.
  static constexpr std::size_t max_kept = 16;
  // A stretch longer than this many requests is not recorded to its end.
  static constexpr std::size_t max_requests = std::size_t{1} << 14;
  // The fewest large requests worth a layout: shorter stretches are the front caches'.
  static constexpr std::size_t min_requests = 8;
  // The most steps the exact searches of one stretch take (tens of ms at most).
  static constexpr std::uint64_t search_steps = std::uint64_t{1} << 20;

  // A large block the arena served. Returns true when it opened a stretch (nothing recorded was
  // live before it).
  bool record_alloc(std::uintptr_t a, std::size_t size, std::size_t alignment, stream_ref s);
  // A recorded block freed. True when it ended a stretch (nothing recorded is live now).
  bool record_free(std::uintptr_t a);
  // No recorded block is live.
  bool quiet() const noexcept { return live_.empty(); }
  // Requests recorded since the stretch in progress began (0 at a quiet moment).
  std::size_t into_stretch() const noexcept { return live_.empty() ? 0 : rec_.size(); }
  // How far into a stretch a kept one may still be taken up: a request or two the job puts before
  // a batch (a mask, an index) and frees with it.
  static constexpr std::size_t take_within = 2;
  // Forgets the stretch in progress (the plan took the requests over).
  void forget_recording();

  // Lays the stretch that just ended out and keeps it if its region is at most `most_bytes`.
  // Returns whether it was kept.
  bool keep(double most_bytes);
  // The stretch most recently used whose first request is this one, or null.
  const kept_stretch* find(std::size_t size, std::size_t alignment, stream_ref s);
  // How taking stretch `id` went: `right` if it was followed (its requests mostly hit), else it is
  // passed over for a while, longer each time in a row.
  void judge(std::uint64_t id, bool right);

  std::size_t kept() const noexcept { return kept_.size(); }

 private:
  struct recorded {
    std::size_t size;
    std::uint8_t align_log2;
    stream_ref stream;
    std::uint64_t start, end;  // ticks from the stretch's start; end UINT64_MAX: still live
  };
  std::vector<recorded> rec_;
  std::unordered_map<std::uintptr_t, std::uint32_t> live_;
  std::uint64_t tick_ = 0;
  bool overflowed_ = false;  // the stretch in progress passed max_requests: not kept
  std::vector<kept_stretch> kept_;
  std::uint64_t clock_ = 0;
  refused_layouts refused_;  // stretches that did not fit
};

}  // namespace gpumem::detail
