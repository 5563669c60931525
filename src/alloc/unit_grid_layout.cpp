// The exact unit-grid layout (unit_grid_layout.hpp): a depth-first search over the blocks in time
// order, the grid's units one bit each, failed states remembered by a hash of which units are
// held until when.
#include "unit_grid_layout.hpp"

#include <algorithm>
#include <bit>
#include <numeric>

namespace gpumem::detail {
namespace {

std::uint64_t mix(std::uint64_t x) noexcept {  // splitmix64's finaliser
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// The states from which no layout follows: open addressing, 0 marks an empty slot.
class state_set {
 public:
  bool contains(std::uint64_t k) const noexcept {
    for (std::size_t i = k & (slots_.size() - 1);; i = (i + 1) & (slots_.size() - 1)) {
      if (slots_[i] == k) return true;
      if (slots_[i] == 0) return false;
    }
  }
  void insert(std::uint64_t k) {
    if (2 * (count_ + 1) > slots_.size()) grow();
    put(k);
  }

 private:
  void put(std::uint64_t k) noexcept {
    std::size_t i = k & (slots_.size() - 1);
    while (slots_[i] != 0 && slots_[i] != k) i = (i + 1) & (slots_.size() - 1);
    count_ += slots_[i] == 0;
    slots_[i] = k;
  }
  void grow() {
    std::vector<std::uint64_t> old(slots_.size() * 2, 0);
    old.swap(slots_);
    count_ = 0;
    for (std::uint64_t k : old)
      if (k) put(k);
  }
  std::vector<std::uint64_t> slots_ = std::vector<std::uint64_t>(1024, 0);
  std::size_t count_ = 0;
};

class grid_search {
 public:
  grid_search(const std::vector<timed_block>& blocks, std::size_t unit, std::size_t units, std::uint64_t& steps_left)
      : units_(units), steps_left_(steps_left), width_(blocks.size()), at_(blocks.size(), 0) {
    for (std::uint32_t b = 0; b < blocks.size(); ++b) {
      width_[b] = static_cast<std::uint32_t>(blocks[b].size / unit);
      events_.push_back({blocks[b].start, b, true});
      events_.push_back({blocks[b].end, b, false});
    }
    // In time; at one tick a free before an allocation (its place is free again).
    std::sort(events_.begin(), events_.end(), [](const event& x, const event& y) {
      return x.tick != y.tick ? x.tick < y.tick : x.alloc < y.alloc;
    });
    // A block's free epoch: the allocations before its free. Blocks of one width freed in the same
    // epoch are alike to every later choice, so states that differ only by which of them holds
    // which units are one state.
    epoch_.assign(blocks.size(), 0);
    std::uint32_t allocs = 0;
    for (const event& ev : events_) {
      if (ev.alloc)
        ++allocs;
      else
        epoch_[ev.block] = allocs;
    }
    for (std::uint32_t b = 0; b < blocks.size(); ++b)
      if (!epoch_[b]) epoch_[b] = allocs + 1;  // (not freed in the stretch)
  }

  bool run(std::vector<std::size_t>& first_unit) {
    if (!search(0)) return false;
    first_unit.assign(at_.begin(), at_.end());
    return true;
  }

 private:
  struct event {
    std::uint64_t tick;
    std::uint32_t block;
    bool alloc;
  };

  // Holding and letting go flip the same bits and the same hash term: the units held from `first`
  // on, and when they are let go.
  void flip(std::uint32_t b) noexcept {
    const std::uint32_t w = width_[b], first = at_[b];
    busy_ ^= (w == 64 ? ~std::uint64_t{0} : ((std::uint64_t{1} << w) - 1)) << first;
    key_ ^= mix((std::uint64_t{epoch_[b]} << 32) | (std::uint64_t{w} << 8) | first);
  }

  bool search(std::size_t e) {
    // Frees take no choice: run through them.
    std::size_t f = e;
    for (; f < events_.size() && !events_[f].alloc; ++f) flip(events_[f].block);
    bool found = false;
    if (f == events_.size()) {
      found = true;
    } else if (steps_left_ > 0) {
      --steps_left_;
      const std::uint64_t key = (key_ ^ mix(f)) | 1;  // never 0, the set's empty slot
      if (!failed_.contains(key)) {
        const std::uint32_t b = events_[f].block, w = width_[b];
        const std::uint64_t grid = units_ == 64 ? ~std::uint64_t{0} : (std::uint64_t{1} << units_) - 1;
        const std::uint64_t free = ~busy_ & grid;
        std::uint64_t fits = free;  // bit p: units [p, p + w) are free
        for (std::uint32_t i = 1; i < w && fits; ++i) fits &= free >> i;
        // Wide blocks from the top of the grid, one-unit blocks from the bottom: kept apart, the
        // narrow ones leave runs for the wide (the order finds BERT's layout in fewer steps).
        while (fits && !found) {
          at_[b] = w > 1 ? static_cast<std::uint32_t>(63 - std::countl_zero(fits))
                         : static_cast<std::uint32_t>(std::countr_zero(fits));
          fits &= ~(std::uint64_t{1} << at_[b]);
          flip(b);
          found = search(f + 1);
          if (!found) flip(b);
        }
        if (!found && steps_left_ > 0) failed_.insert(key);
      }
    }
    // Undo the frees (the caller's state is as it was) unless this branch is the layout.
    if (!found)
      for (std::size_t g = f; g-- > e;) flip(events_[g].block);
    return found;
  }

  std::size_t units_;
  std::uint64_t& steps_left_;
  std::vector<std::uint32_t> width_;  // per block, in units
  std::vector<std::uint32_t> at_;     // per block: its first unit
  std::vector<event> events_;
  std::uint64_t busy_ = 0;            // the units held now, one bit each
  std::vector<std::uint32_t> epoch_;  // per block: its free epoch (the constructor says what)
  std::uint64_t key_ = 0;             // hash of (first unit, width, free epoch) over the blocks held
  state_set failed_;
};

}  // namespace

std::size_t tightest_unit_grid_layout(const std::vector<timed_block>& blocks, std::size_t beat,
                                      std::uint64_t& steps_left, std::vector<std::size_t>& offset) {
  if (blocks.empty() || blocks.size() > max_grid_blocks) return 0;
  std::size_t unit = 0;
  for (const timed_block& b : blocks) unit = std::gcd(unit, b.size);
  if (!unit) return 0;
  // The blocks' peak, in units: no layout is below it.
  std::vector<std::pair<std::uint64_t, std::int64_t>> change;
  for (const timed_block& b : blocks) {
    change.push_back({b.start, static_cast<std::int64_t>(b.size / unit)});
    change.push_back({b.end, -static_cast<std::int64_t>(b.size / unit)});
  }
  std::sort(change.begin(), change.end());  // at one tick the frees (negative) first
  std::int64_t live = 0, peak = 0;
  for (auto [tick, d] : change) peak = std::max(peak, live += d);
  for (auto units = static_cast<std::size_t>(peak); units <= max_grid_units && units * unit < beat; ++units) {
    std::vector<std::size_t> first;
    if (grid_search(blocks, unit, units, steps_left).run(first)) {
      offset.resize(blocks.size());
      for (std::size_t b = 0; b < blocks.size(); ++b) offset[b] = first[b] * unit;
      return units * unit;
    }
    if (!steps_left) break;
  }
  return 0;
}

}  // namespace gpumem::detail
