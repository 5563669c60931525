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

// A request's class and the class's size together, for n >= 1: with m = n - 1, past 4 KiB the
// class is m's bit width and the 3 bits below its top bit, and the size is m rounded up past those
// bits — shifts only, no division (the allocate's fast path computes this on every call).
// Up to 4 KiB the same formula with the step held at 256 B (m's bit width taken as 12: bit 11 is
// set before it is measured, which also spares the zero case) gives the linear classes: top =
// m / 256 is 0..15 and the index 8 * 8 + top - 64 = top. So there is no branch between the two
// ranges: request sizes come in no order a branch predictor can learn, so such a test would be
// mispredicted often on the common path.
struct class_and_size {
  std::size_t index;
  std::size_t bytes;
};
constexpr class_and_size size_class_for(std::size_t n) noexcept {
  const std::size_t m = n - 1;
  const auto width = static_cast<unsigned>(std::bit_width(m | (linear_limit >> 1)));  // 12 up to 4 KiB
  const unsigned shift = width - 4;     // 2^shift: the class's step
  const std::size_t top = m >> shift;  // 8..15 past 4 KiB, 0..15 up to it
  return {shift * classes_per_doubling + top - 64, (top + 1) << shift};
}
static_assert(linear_limit == std::size_t{1} << 12 && class_unit == std::size_t{1} << 8,
              "size_class_for's linear range is m's bit width 12 at a 2^8 step");

constexpr std::size_t size_class_of(std::size_t n) noexcept { return n == 0 ? 0 : size_class_for(n).index; }

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
static_assert(size_class_for(4097).bytes == 4608 && size_class_for(65537).bytes == 73728);
static_assert(size_class_of(std::size_t{1} << 47) == 16 + 34 * classes_per_doubling + 7);

}  // namespace gpumem::detail
