#pragma once
// Size classes for small requests. 256 B steps up to 4 KiB (the alignment every block honours),
// then 8 classes per doubling: a slot wastes at most 1/8 of the next power of two — about 6%
// on average — while a handful of classes covers all of 4 KiB .. 1 MiB.
#include <bit>
#include <cstddef>
#include <cstdint>

namespace gpumem::detail {

inline constexpr std::size_t class_unit = 256;
inline constexpr std::size_t linear_limit = 4096;   // 16 classes of 256 B steps
inline constexpr std::size_t classes_per_doubling = 8;

constexpr std::size_t size_class_of(std::size_t n) noexcept {
  if (n <= linear_limit) return n == 0 ? 0 : (n + class_unit - 1) / class_unit - 1;
  const unsigned p = static_cast<unsigned>(std::bit_width(n - 1));  // 2^p >= n > 2^(p-1)
  const std::size_t step = std::size_t{1} << (p - 4);                // 2^(p-1) / 8
  const std::size_t low = std::size_t{1} << (p - 1);
  return 16 + (p - 13) * classes_per_doubling + (n - low + step - 1) / step - 1;
}

constexpr std::size_t size_class_bytes(std::size_t c) noexcept {
  if (c < 16) return (c + 1) * class_unit;
  const std::size_t k = c - 16;
  const unsigned p = static_cast<unsigned>(13 + k / classes_per_doubling);
  const std::size_t step = std::size_t{1} << (p - 4);
  return (std::size_t{1} << (p - 1)) + (k % classes_per_doubling + 1) * step;
}

static_assert(size_class_of(1) == 0 && size_class_bytes(0) == 256);
static_assert(size_class_of(4096) == 15 && size_class_bytes(15) == 4096);
static_assert(size_class_of(4097) == 16 && size_class_bytes(16) == 4608);
static_assert(size_class_bytes(size_class_of(65536)) == 65536);
static_assert(size_class_bytes(size_class_of(65537)) == 73728);

}  // namespace gpumem::detail
