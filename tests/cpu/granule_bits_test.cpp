// The arena's granule bits and sets: a count over any range agrees with counting one granule at a
// time, across word edges, at the ends, and for empty ranges; a set answers as std::set does.
#include "granule_bits.hpp"

#include <gtest/gtest.h>

#include <cstddef>
#include <random>
#include <set>
#include <vector>

namespace gpumem::detail {
namespace {

TEST(GranuleBits, CountAgreesWithCountingOneAtATime) {
  constexpr std::size_t n = 300;  // words of 64: ranges that start, end and cross inside words
  granule_bits bits;
  bits.assign(n);
  std::vector<bool> model(n, false);
  std::mt19937_64 rng(7);
  for (int step = 0; step < 2000; ++step) {
    const std::size_t g = rng() % n;
    if (rng() % 3) {
      bits.set(g);
      model[g] = true;
    } else {
      bits.clear(g);
      model[g] = false;
    }
    const std::size_t a = rng() % (n + 1), b = rng() % (n + 1);
    const std::size_t g0 = std::min(a, b), g1 = std::max(a, b);
    std::size_t want = 0;
    for (std::size_t k = g0; k < g1; ++k) want += model[k];
    ASSERT_EQ(bits.count(g0, g1), want) << "[" << g0 << ", " << g1 << ") at step " << step;
    ASSERT_EQ(bits.test(g), model[g]);
  }
}

TEST(GranuleBits, EdgesOfWordsAndTheWholeRange) {
  granule_bits bits;
  bits.assign(256);
  for (std::size_t g : {0, 63, 64, 127, 128, 255}) bits.set(g);
  EXPECT_EQ(bits.count(0, 256), 6u);
  EXPECT_EQ(bits.count(0, 1), 1u);
  EXPECT_EQ(bits.count(1, 63), 0u);
  EXPECT_EQ(bits.count(63, 65), 2u) << "one granule each side of a word's edge";
  EXPECT_EQ(bits.count(64, 128), 2u) << "exactly one word";
  EXPECT_EQ(bits.count(5, 5), 0u) << "an empty range";
  EXPECT_EQ(bits.count(255, 256), 1u) << "the last granule";
  bits.clear(63);
  EXPECT_EQ(bits.count(0, 128), 3u);
}

TEST(GranuleSet, AnswersAsStdSetDoes) {
  constexpr std::size_t n = 5000;  // summary words past the first: sparse members far apart
  granule_set idle;
  idle.assign(n);
  std::set<std::size_t> model;
  std::mt19937_64 rng(11);
  EXPECT_EQ(idle.last_below(n), granule_set::none) << "an empty set";
  for (int step = 0; step < 4000; ++step) {
    // Mostly few members, now and then a burst: both the sparse and the dense case.
    const std::size_t g = step % 500 < 50 ? rng() % 200 : rng() % n;
    if (rng() % 2) {
      idle.insert(g);
      model.insert(g);
    } else {
      idle.erase(g);
      model.erase(g);
    }
    ASSERT_EQ(idle.size(), model.size());
    ASSERT_EQ(idle.empty(), model.empty());
    ASSERT_EQ(idle.contains(g), model.count(g) == 1);
    const std::size_t below = rng() % (n + 1);
    const auto it = model.lower_bound(below);
    const std::size_t want = it == model.begin() ? granule_set::none : *std::prev(it);
    ASSERT_EQ(idle.last_below(below), want) << "below " << below << " at step " << step;
  }
  // Walking down from the top visits every member once, highest first.
  std::vector<std::size_t> walked;
  for (std::size_t g = idle.last_below(n); g != granule_set::none; g = idle.last_below(g)) walked.push_back(g);
  EXPECT_EQ(walked, std::vector<std::size_t>(model.rbegin(), model.rend()));
}

}  // namespace
}  // namespace gpumem::detail
