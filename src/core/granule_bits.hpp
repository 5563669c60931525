#pragma once
// One bit per granule of the arena's address range: which granules are mapped. `place` asks how
// many granules of each candidate place are unmapped; by default, where most places cross mapped
// and unmapped granules alike, counting them one granule (one 8-byte handle) at a time was about
// a tenth of bert's instructions per op. Here a count reads one word per 64 granules.
#include <bit>
#include <cstddef>
#include <cstdint>
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

 private:
  static constexpr std::uint64_t bit(std::size_t g) noexcept { return std::uint64_t{1} << (g % 64); }
  std::vector<std::uint64_t> words_;
};

}  // namespace gpumem::detail
