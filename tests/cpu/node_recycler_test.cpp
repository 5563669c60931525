// The arena's node recycler: freed nodes come back for the next node of their size, sizes do not
// mix, and containers built on it behave as std's do.
#include "node_recycler.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <utility>
#include <vector>

namespace gpumem::detail {
namespace {

TEST(NodeRecycler, AFreedNodeServesTheNextOfItsSizeOnly) {
  if (!node_recycler::recycles) GTEST_SKIP() << "AddressSanitizer build: nodes go to the heap so a use after free is caught";
  node_recycler r;
  void* a = r.take(48);
  void* b = r.take(48);
  EXPECT_NE(a, b);
  r.give(a, 48);
  void* other = r.take(96);
  EXPECT_NE(other, a) << "a node of another size must not reuse it";
  EXPECT_EQ(r.take(40), a) << "48 and 40 bytes round to the same whole cache line";
  r.give(b, 48);
  EXPECT_EQ(r.take(48), b);
  for (void* p : {a, b}) r.give(p, 48);  // the recycler frees what it holds when it goes
  r.give(other, 96);
}

// A tree walk reads each node's links and key; on one cache line that is one load per level.
TEST(NodeRecycler, EveryNodeStartsOnACacheLineAndSizesRoundToWholeLines) {
  if (!node_recycler::recycles) GTEST_SKIP() << "AddressSanitizer build: nodes go to the heap so a use after free is caught";
  node_recycler r;
  std::vector<std::pair<void*, std::size_t>> taken;
  for (std::size_t bytes : {8, 40, 64, 65, 112, 128, 200, 256}) {
    void* p = r.take(bytes);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(p) % 64, 0u) << bytes << " B";
    taken.emplace_back(p, bytes);
  }
  // 112 B takes two lines, as 65 B does: a node given back at one serves the other, never a node of
  // one line.
  void* two_lines = taken[4].first;
  taken.erase(taken.begin() + 4);
  r.give(two_lines, 112);
  void* one_line = r.take(64);
  EXPECT_NE(one_line, two_lines);
  EXPECT_EQ(r.take(65), two_lines);
  taken.emplace_back(one_line, 64);
  taken.emplace_back(two_lines, 65);
  for (auto [p, bytes] : taken) r.give(p, bytes);
}

TEST(NodeRecycler, ContainersOnItMatchStdAndReuseTheirNodes) {
  node_recycler r;
  recycled_map<std::uintptr_t, int> m{recycled<std::pair<const std::uintptr_t, int>>(r)};
  recycled_set<std::uintptr_t> s{recycled<std::uintptr_t>(r)};
  std::map<std::uintptr_t, int> want;
  for (int round = 0; round < 3; ++round) {
    for (std::uintptr_t k = 0; k < 1000; ++k) {
      m.emplace(k * 7 + round, static_cast<int>(k));
      want.emplace(k * 7 + round, static_cast<int>(k));
      s.insert(k * 3);
    }
    for (std::uintptr_t k = 0; k < 1000; k += 2) {
      m.erase(k * 7 + round);
      want.erase(k * 7 + round);
      s.erase(k * 3);
    }
  }
  ASSERT_EQ(m.size(), want.size());
  EXPECT_TRUE(std::equal(m.begin(), m.end(), want.begin()));
  EXPECT_EQ(s.size(), 500u);
  if (!node_recycler::recycles) return;
  // A node erased is the next one allocated.
  const std::uintptr_t key = m.begin()->first;
  const auto* node_value = &*m.begin();
  m.erase(m.begin());
  m.emplace(key, -1);
  EXPECT_EQ(&*m.find(key), node_value);
}

}  // namespace
}  // namespace gpumem::detail
