// The arena's node recycler: freed nodes come back for the next node of their size, sizes do not
// mix, and containers built on it behave as std's do.
#include "core/node_recycler.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>

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
  EXPECT_EQ(r.take(40), a) << "48 and 40 bytes round to the same 16-byte step";
  r.give(b, 48);
  EXPECT_EQ(r.take(48), b);
  for (void* p : {a, b}) r.give(p, 48);  // the recycler frees what it holds when it goes
  r.give(other, 96);
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
