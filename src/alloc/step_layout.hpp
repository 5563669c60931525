#pragma once
// Laying blocks out in one region once their lifetimes are known, as a compiler's memory planner
// does: the step plan's layout of a step (step_plan.cpp) and of a stretch (stretch_library.cpp).
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "gpumem/core.hpp"

namespace gpumem::detail {

// A block's time: one interval, or two where it lives past a step's end and into the next step's
// start.
struct timed_span {
  std::uint64_t s0, e0, s1, e1;  // [s0, e0) and [s1, e1); the second empty when s1 == e1
  bool meets(const timed_span& o) const noexcept {
    auto cut = [](std::uint64_t a, std::uint64_t b, std::uint64_t c, std::uint64_t d) { return a < d && c < b; };
    return cut(s0, e0, o.s0, o.e0) || cut(s0, e0, o.s1, o.e1) || cut(s1, e1, o.s0, o.e0) || cut(s1, e1, o.s1, o.e1);
  }
};

// One request of a laid-out plan: what it asks for and where it goes.
struct planned_entry {
  std::size_t size;
  std::uint8_t align_log2;
  stream_ref stream;
  std::size_t offset;  // SIZE_MAX: another stream's request, left to the arena
};

// One value more into a hash of a run of requests (FNV-1a over 64-bit words).
inline void hash_into(std::uint64_t& h, std::uint64_t v) noexcept { h = (h ^ v) * 0x100000001b3ULL; }
inline constexpr std::uint64_t hash_start = 0xcbf29ce484222325ULL;

// Runs of requests whose layout did not fit, by hash, each with the bound it was over: the same
// run is not laid out again (laying out, and searching, is the costly part) until the bound has
// grown past it. The last `most` are remembered.
class refused_layouts {
 public:
  static constexpr std::size_t most = 64;
  bool has(std::uint64_t key, double bound) const noexcept {
    for (const auto& [k, b] : seen_)
      if (k == key && bound <= b) return true;
    return false;
  }
  void add(std::uint64_t key, double bound) {
    if (seen_.size() < most) seen_.push_back({key, bound});
    else seen_[next_++ % most] = {key, bound};
  }

 private:
  std::vector<std::pair<std::uint64_t, double>> seen_;
  std::size_t next_ = 0;
};

// Greedy placement of the blocks `planned` (indexes into `when` and `sizes`), best-fit gaps, in
// three orders (by size, by lifetime, by both); the smallest extent wins. `period`: the last tick
// any span reaches. `offset` gets each planned block's offset (SIZE_MAX for the others); returns
// the extent.
std::size_t greedy_layout(const std::vector<timed_span>& when, const std::vector<planned_entry>& blocks,
                          const std::vector<std::uint32_t>& planned, std::uint64_t period,
                          std::vector<std::size_t>& offset);

}  // namespace gpumem::detail
