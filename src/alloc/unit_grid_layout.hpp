#pragma once
// An exact layout for blocks whose sizes share a large unit: the step plan's refinement where its
// greedy layout of a stretch is over the reserve ceiling (step_plan.cpp).
//
// Greedy orders miss layouts that exist. A batch of BERT's largest shape, 24 blocks of four units
// and 125 of one, fits without moves in 11 units (its peak) where every greedy order takes 12.
// When a stretch's blocks all measure whole multiples of one unit and its peak is a few dozen
// units, the layouts can be searched: blocks in time order, each at any free run of units; a
// state that failed once (at the same request, the units held and until which of the requests
// each is let go) is not tried again, so alike blocks swapped count once.
// Any layout can be pushed down until every block sits at a multiple of the unit, so searching the
// unit grid misses none. The search is bounded by a count of steps: on a stretch without a layout
// near its peak it gives up rather than stall the request that triggered it.
#include <cstddef>
#include <cstdint>
#include <vector>

namespace gpumem::detail {

struct timed_block {
  std::uint64_t start, end;  // live over [start, end), in the stretch's ticks
  std::size_t size;          // bytes
};

// The most units the grid may have (one bit each), and the most blocks a search takes on.
inline constexpr std::size_t max_grid_units = 64;
inline constexpr std::size_t max_grid_blocks = 4096;

// The fewest units, from the blocks' peak up, in which every block sits at a multiple of the
// blocks' common unit with no two live at once overlapping, while that extent is below `beat`
// bytes. Returns the extent in bytes and each block's offset in `offset`; 0 when there is none
// below `beat`, when the sizes share no unit that makes the grid small enough, or when the search
// used up `steps_left` (each step counted off it).
std::size_t tightest_unit_grid_layout(const std::vector<timed_block>& blocks, std::size_t beat,
                                      std::uint64_t& steps_left, std::vector<std::size_t>& offset);

}  // namespace gpumem::detail
