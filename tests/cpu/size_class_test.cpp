// Size classes: the allocate's fast path takes a request's class and the class's size from
// size_class_for (shifts only); everything else — slabs, bins' limits, the pool model — goes by
// size_class_of and size_class_bytes. They must agree for every request, and the classes must be
// what size_class.hpp promises: 256 B steps to 4 KiB, then 8 per doubling, each the smallest that
// holds the request.
#include <gtest/gtest.h>

#include <cstddef>
#include <random>

#include "front_cache.hpp"
#include "size_class.hpp"

namespace {
using namespace gpumem::detail;

// The promise, written the slow way: the smallest class size that holds n.
std::size_t smallest_class_bytes_holding(std::size_t n) {
  if (n <= linear_limit) return (n + class_unit - 1) / class_unit * class_unit;
  std::size_t low = linear_limit;  // a power of two under n
  while (low * 2 < n) low *= 2;
  const std::size_t step = low / classes_per_doubling;
  return (n + step - 1) / step * step;
}

void expect_consistent(std::size_t n) {
  const class_and_size c = size_class_for(n);
  // The pool's shape_of bins a large request by the class of the request itself, though its block
  // is the request rounded up to 256 B: the rounding must never cross into the next class.
  ASSERT_EQ(size_class_for((n + class_unit - 1) / class_unit * class_unit).index, c.index) << n;
  ASSERT_EQ(c.index, size_class_of(n)) << n;
  ASSERT_EQ(c.bytes, size_class_bytes(c.index)) << n;
  ASSERT_EQ(c.bytes, smallest_class_bytes_holding(n)) << n;
  ASSERT_LT(c.index, bin_count) << n;
  if (c.index > 0) {
    ASSERT_LT(size_class_bytes(c.index - 1), n) << n << ": a smaller class holds it";
  }
}

TEST(SizeClass, EveryRequestUpTo16MiBGetsTheSmallestClassThatHoldsIt) {
  for (std::size_t n = 1; n <= (std::size_t{1} << 24); ++n) expect_consistent(n);
}

TEST(SizeClass, PowersOfTwoAndTheirNeighboursUpToThePlausibleLimit) {
  for (unsigned p = 1; p <= 47; ++p)
    for (std::size_t d = 0; d <= 3; ++d) {
      const std::size_t two = std::size_t{1} << p;
      if (p < 47) expect_consistent(two + d);  // 2^47 is the most a plausible request asks
      if (two > d) expect_consistent(two - d);
    }
}

TEST(SizeClass, RandomLargeRequests) {
  std::mt19937_64 rng(7);
  for (int i = 0; i < 200000; ++i) {
    const std::size_t n = (rng() >> (17 + rng() % 30)) + 1;  // up to 2^47
    expect_consistent(n);
  }
}

}  // namespace
