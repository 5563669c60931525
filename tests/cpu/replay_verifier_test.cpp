// The soak's building blocks on their own: the overlap index and the verifiers (shadow model and
// real host memory), including sizes that are not whole words.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "live_block_index.hpp"
#include "gpumem/replay_verifier.hpp"

namespace gpumem {
namespace {

TEST(live_block_index, finds_any_overlap_and_ignores_neighbours) {
  live_block_index idx;
  live_block_index::block other;
  EXPECT_TRUE(idx.insert(1000, 100, {1, 0}));  // [1000, 1100)
  EXPECT_TRUE(idx.insert(1100, 50, {2, 0}));   // touches, does not overlap
  EXPECT_TRUE(idx.insert(900, 100, {3, 0}));   // ends where the first starts
  EXPECT_FALSE(idx.insert(1010, 10, {4, 0}, &other));  // inside
  EXPECT_EQ(other.addr, 1000u);
  EXPECT_EQ(other.bytes, 100u);
  EXPECT_EQ(other.from.row, 1u);
  EXPECT_FALSE(idx.insert(800, 1000, {5, 0}));  // covering
  EXPECT_FALSE(idx.insert(1100, 1, {6, 0}, &other));  // same start
  EXPECT_EQ(other.from.row, 2u);
  EXPECT_FALSE(idx.insert(950, 100, {7, 0}, &other));  // over a boundary
  EXPECT_EQ(idx.size(), 3u);  // overlapping blocks were not added
}

TEST(live_block_index, erase_frees_the_range_and_reuses_nodes) {
  live_block_index idx;
  std::vector<live_block_index::handle> handles;
  for (std::uintptr_t i = 0; i < 100; ++i) handles.push_back(*idx.insert(i * 512, 512, {i, 0}));
  EXPECT_FALSE(idx.insert(512 * 7 + 4, 8, {0, 0}));
  idx.erase(handles[7]);
  auto h = idx.insert(512 * 7 + 4, 8, {0, 0});  // the hole is free now
  ASSERT_TRUE(h);
  EXPECT_EQ(idx.size(), 100u);
  for (int round = 0; round < 1000; ++round) {  // churn: the same nodes go round
    idx.erase(*h);
    h = idx.insert(512 * 7 + 4, 8, {0, 0});
    ASSERT_TRUE(h);
  }
  EXPECT_FALSE(idx.insert(512 * 8, 1, {0, 0}));
}

void* at(std::uintptr_t a) { return reinterpret_cast<void*>(a); }

TEST(shadow_verifier, clean_blocks_match) {
  auto v = make_shadow_verifier();
  v->stamp(at(0x1000), 1024, 1, stream_ref{});
  v->stamp(at(0x1400), 1024, 2, stream_ref{});  // adjacent
  v->check(at(0x1000), 1024, 1, stream_ref{}, stream_ref{});
  v->check(at(0x1400), 1024, 2, stream_ref{}, stream_ref{7});
  EXPECT_EQ(v->mismatched_words(), 0u);
}

TEST(shadow_verifier, a_block_stamped_over_a_live_one_takes_its_words) {
  auto v = make_shadow_verifier();
  v->stamp(at(0x1000), 1024, 1, stream_ref{});
  v->stamp(at(0x1100), 64, 2, stream_ref{});  // inside block 1: 16 words
  v->check(at(0x1100), 64, 2, stream_ref{}, stream_ref{});
  EXPECT_EQ(v->mismatched_words(), 0u);
  v->check(at(0x1000), 1024, 1, stream_ref{}, stream_ref{});
  EXPECT_EQ(v->mismatched_words(), 16u);
}

TEST(shadow_verifier, a_block_over_the_end_of_another_and_restamps_of_freed_memory) {
  auto v = make_shadow_verifier();
  v->stamp(at(0x1000), 256, 1, stream_ref{});
  v->stamp(at(0x10c0), 256, 2, stream_ref{});  // covers block 1's last 64 B
  v->check(at(0x1000), 256, 1, stream_ref{}, stream_ref{});
  EXPECT_EQ(v->mismatched_words(), 16u);
  v->check(at(0x10c0), 256, 2, stream_ref{}, stream_ref{});
  EXPECT_EQ(v->mismatched_words(), 16u);
  v->stamp(at(0x1000), 512, 3, stream_ref{});  // freed memory handed out again: fine
  v->check(at(0x1000), 512, 3, stream_ref{}, stream_ref{});
  EXPECT_EQ(v->mismatched_words(), 16u);
}

TEST(shadow_verifier, only_whole_words_count) {
  auto v = make_shadow_verifier();
  v->stamp(at(0x1000), 3, 1, stream_ref{});  // no whole word: nothing to check
  v->check(at(0x1000), 3, 1, stream_ref{}, stream_ref{});
  v->stamp(at(0x2000), 10, 2, stream_ref{});  // 2 words
  v->stamp(at(0x2008), 4, 3, stream_ref{});   // over block 2's 2-byte tail only
  v->check(at(0x2000), 10, 2, stream_ref{}, stream_ref{});
  EXPECT_EQ(v->mismatched_words(), 0u);
}

TEST(shadow_verifier, unmapped_blocks_mismatch_in_full) {
  bool mapped = true;
  auto v = make_shadow_verifier([&](const void*, std::size_t) { return mapped; });
  v->stamp(at(0x1000), 400, 1, stream_ref{});
  mapped = false;
  v->check(at(0x1000), 400, 1, stream_ref{}, stream_ref{});
  EXPECT_EQ(v->mismatched_words(), 100u);
}

TEST(host_memory_verifier, counts_changed_words_in_real_memory) {
  std::vector<unsigned char> a(1026), b(1024);
  auto v = make_host_memory_verifier();
  v->stamp(a.data(), a.size(), 1, stream_ref{});
  v->stamp(b.data(), b.size(), 2, stream_ref{});
  EXPECT_NE(std::memcmp(a.data(), b.data(), 1024), 0);  // tags give different bytes
  a[1025] ^= 0xff;                                      // the 2-byte tail is not checked
  a[8] ^= 1;                                            // word 2
  std::memset(a.data() + 100, 0, 8);                    // words 25 and 26
  v->check(a.data(), a.size(), 1, stream_ref{}, stream_ref{});
  v->check(b.data(), b.size(), 2, stream_ref{}, stream_ref{});
  EXPECT_EQ(v->mismatched_words(), 3u);
  v->check(b.data(), b.size(), 3, stream_ref{}, stream_ref{});  // checked against another tag: all differ
  EXPECT_EQ(v->mismatched_words(), 3u + 256u);
}

}  // namespace
}  // namespace gpumem
