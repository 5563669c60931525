// The arena's node recycler: freed nodes come back for the next node of their size, sizes do not
// mix, and containers built on it behave as std's do.
#include "core/node_recycler.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <set>

namespace gpumem::detail {
namespace {

TEST(NodeRecycler, AFreedNodeServesTheNextOfItsSizeOnly) {
  if (!node_recycler::recycles) GTEST_SKIP() << "AddressSanitizer build: nodes go to the heap so a use after free is caught";
  node_recycler r;
  void* a = r.take(48);
  void* b = r.take(48);
  EXPECT_NE(a, b);
  r.give(a, 48);
  EXPECT_NE(r.take(96), a) << "a node of another size must not reuse it";
  EXPECT_EQ(r.take(40), a) << "48 and 40 bytes round to the same 16-byte step";
  r.give(b, 48);
  EXPECT_EQ(r.take(48), b);
}

TEST(NodeRecycler, ContainersOnItMatchStdAndReuseTheirNodes) {
  node_recycler r;
  std::map<std::uintptr_t, int, std::less<std::uintptr_t>, recycled<std::pair<const std::uintptr_t, int>>> m{
      recycled<std::pair<const std::uintptr_t, int>>(r)};
  std::set<std::uintptr_t, std::less<std::uintptr_t>, recycled<std::uintptr_t>> s{recycled<std::uintptr_t>(r)};
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
