#pragma once
// Sets of the arena's granules as bits, one per granule of its address range.
// - granule_bits: which granules are mapped. `place` asks how many granules of each candidate
//   place are unmapped; by default, where most places cross mapped and unmapped granules alike,
//   counting them one granule (one 8-byte handle) at a time was about a tenth of bert's
//   instructions per op. Here a count reads one word per 64 granules.
// - granule_set: the idle granules (mapped, no busy byte), which every carve and free over mapped
//   memory changes. As a tree they cost a node's insert or erase, and rebalancing, per granule.
#include <bit>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

namespace gpumem::detail {

class granule_bits {
 public:
  void assign(std::size_t granules) { words_.assign((granules + 63) / 64, 0); }
  void set(std::size_t g) noexcept { words_[g / 64] |= bit(g); }
  void clear(std::size_t g) noexcept { words_[g / 64] &= ~bit(g); }
  bool test(std::size_t g) const noexcept { return (words_[g / 64] & bit(g)) != 0; }
  // Set bits among granules [g0, g1).
  std::size_t count(std::size_t g0, std::size_t g1) const noexcept {
    if (g0 >= g1) return 0;
    const std::size_t w0 = g0 / 64, w1 = (g1 - 1) / 64;
    const std::uint64_t head = ~std::uint64_t{0} << (g0 % 64), tail = ~std::uint64_t{0} >> (63 - (g1 - 1) % 64);
    if (w0 == w1) return static_cast<std::size_t>(std::popcount(words_[w0] & head & tail));
    std::size_t n = static_cast<std::size_t>(std::popcount(words_[w0] & head) + std::popcount(words_[w1] & tail));
    for (std::size_t w = w0 + 1; w < w1; ++w) n += static_cast<std::size_t>(std::popcount(words_[w]));
    return n;
  }
  std::uint64_t word(std::size_t w) const noexcept { return words_[w]; }
  // The highest set bit below `g` among words [w_lo, g's word], or `none`.
  static constexpr std::size_t none = std::numeric_limits<std::size_t>::max();
  std::size_t last_below(std::size_t g, std::size_t w_lo = 0) const noexcept {
    if (g == 0) return none;
    std::size_t w = (g - 1) / 64;
    std::uint64_t x = words_[w] & (~std::uint64_t{0} >> (63 - (g - 1) % 64));
    while (!x) {
      if (w == w_lo) return none;
      x = words_[--w];
    }
    return w * 64 + 63 - static_cast<std::size_t>(std::countl_zero(x));
  }

 private:
  static constexpr std::uint64_t bit(std::size_t g) noexcept { return std::uint64_t{1} << (g % 64); }
  std::vector<std::uint64_t> words_;
};

// A set of granules with its size, and a summary bit per word (set where the word has a member),
// so the highest member below a granule takes a few words to find however sparse the set is.
class granule_set {
 public:
  static constexpr std::size_t none = granule_bits::none;
  void assign(std::size_t granules) {
    members_.assign(granules);
    words_in_use_.assign((granules + 63) / 64);
    size_ = 0;
  }
  void insert(std::size_t g) noexcept {
    if (members_.test(g)) return;
    members_.set(g);
    words_in_use_.set(g / 64);
    ++size_;
  }
  void erase(std::size_t g) noexcept {
    if (!members_.test(g)) return;
    members_.clear(g);
    if (!members_.word(g / 64)) words_in_use_.clear(g / 64);
    --size_;
  }
  bool contains(std::size_t g) const noexcept { return members_.test(g); }
  std::size_t size() const noexcept { return size_; }
  bool empty() const noexcept { return size_ == 0; }
  // The highest member below `g` (`none` if there is none): its own word first, then the highest
  // word in use below it.
  std::size_t last_below(std::size_t g) const noexcept {
    if (g == 0) return none;
    const std::size_t w = (g - 1) / 64;
    if (const std::size_t m = members_.last_below(g, w); m != none) return m;
    const std::size_t v = words_in_use_.last_below(w);
    return v == none ? none : members_.last_below(v * 64 + 64, v);
  }

 private:
  granule_bits members_;
  granule_bits words_in_use_;
  std::size_t size_ = 0;
};

}  // namespace gpumem::detail
