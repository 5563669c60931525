// gpumem::pack: layout properties over random request sets, clear errors, RAII.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "gpumem/pack.hpp"
#include "support/host_backed_resource.hpp"

namespace {

std::vector<gpumem::pack_request> random_requests(std::mt19937_64& rng) {
  std::uniform_int_distribution<std::size_t> count(0, 200);
  std::uniform_int_distribution<int> log_align(0, 12);       // 1 B .. 4 KiB
  std::uniform_int_distribution<std::size_t> size(0, 5000);
  std::vector<gpumem::pack_request> out(count(rng));
  for (auto& q : out) q = {size(rng), std::size_t{1} << log_align(rng)};
  return out;
}

}  // namespace

TEST(pack_layout, random_sets_are_aligned_disjoint_inside_and_tight) {
  std::mt19937_64 rng(20240601);
  for (int round = 0; round < 500; ++round) {
    const auto reqs = random_requests(rng);
    const gpumem::pack_layout l = gpumem::plan_pack(reqs);
    ASSERT_EQ(l.offsets.size(), reqs.size());

    std::size_t payload = 0, max_align = 1, padding_bound = 0;
    for (std::size_t i = 0; i < reqs.size(); ++i) {
      SCOPED_TRACE("round " + std::to_string(round) + ", request " + std::to_string(i));
      EXPECT_EQ(l.offsets[i] % reqs[i].alignment, 0u);
      EXPECT_LE(l.offsets[i] + reqs[i].bytes, l.total_bytes);
      payload += reqs[i].bytes;
      max_align = std::max(max_align, reqs[i].alignment);
      padding_bound += reqs[i].alignment - 1;  // padding before a buffer < its alignment
    }
    EXPECT_EQ(l.alignment, max_align);
    EXPECT_EQ(l.padding_bytes, l.total_bytes - payload);
    EXPECT_LE(l.total_bytes, payload + padding_bound);

    // Non-overlap: sort the non-empty ranges by offset; each ends before the next begins.
    std::vector<std::pair<std::size_t, std::size_t>> ranges;
    for (std::size_t i = 0; i < reqs.size(); ++i) {
      if (reqs[i].bytes) ranges.emplace_back(l.offsets[i], l.offsets[i] + reqs[i].bytes);
    }
    std::sort(ranges.begin(), ranges.end());
    for (std::size_t i = 1; i < ranges.size(); ++i) {
      ASSERT_LE(ranges[i - 1].second, ranges[i].first) << "round " << round;
    }
  }
}

TEST(pack_layout, sizes_that_are_multiples_of_their_alignment_need_no_padding) {
  std::mt19937_64 rng(7);
  std::uniform_int_distribution<int> log_align(0, 10);
  std::uniform_int_distribution<std::size_t> mult(0, 8);
  for (int round = 0; round < 200; ++round) {
    std::vector<gpumem::pack_request> reqs(50);
    std::size_t payload = 0;
    for (auto& q : reqs) {
      q.alignment = std::size_t{1} << log_align(rng);
      q.bytes = q.alignment * mult(rng);
      payload += q.bytes;
    }
    const auto l = gpumem::plan_pack(reqs);
    EXPECT_EQ(l.padding_bytes, 0u);
    EXPECT_EQ(l.total_bytes, payload);
  }
}

TEST(pack_layout, decreasing_alignment_keeping_the_callers_order_among_equals) {
  const std::vector<gpumem::pack_request> reqs{{10, 4}, {8, 16}, {3, 4}, {16, 16}, {1, 1}};
  const auto l = gpumem::plan_pack(reqs);
  // 16-aligned first, in order (request 1 then 3), then the 4-aligned (0 then 2), then request 4.
  EXPECT_EQ(l.offsets[1], 0u);
  EXPECT_EQ(l.offsets[3], 16u);
  EXPECT_EQ(l.offsets[0], 32u);
  EXPECT_EQ(l.offsets[2], 44u);
  EXPECT_EQ(l.offsets[4], 47u);
  EXPECT_EQ(l.total_bytes, 48u);
  EXPECT_EQ(l.padding_bytes, 10u);  // 8 after request 1, 2 after request 0
  EXPECT_EQ(l.alignment, 16u);
}

TEST(pack_layout, bad_alignment_names_the_request) {
  const std::vector<gpumem::pack_request> zero{{8, 8}, {4, 0}};
  try {
    (void)gpumem::plan_pack(zero);
    FAIL() << "alignment 0 accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("request 1 (4 bytes, alignment 0): alignment is 0"),
              std::string::npos)
        << e.what();
  }
  const std::vector<gpumem::pack_request> three{{8, 3}};
  EXPECT_THROW((void)gpumem::plan_pack(three), std::invalid_argument);
}

TEST(pack_layout, overflowing_total_is_an_error_not_a_wrap) {
  constexpr std::size_t max = std::numeric_limits<std::size_t>::max();
  const std::vector<gpumem::pack_request> huge{{max - 8, 16}, {64, 16}};
  try {
    (void)gpumem::plan_pack(huge);
    FAIL() << "overflow accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("overflows size_t"), std::string::npos) << e.what();
  }
  // Both 8-aligned: the second one's aligned offset itself lies past size_t.
  const std::vector<gpumem::pack_request> align_past_end{{max - 2, 8}, {1, 8}};
  EXPECT_THROW((void)gpumem::plan_pack(align_past_end), std::invalid_argument);
}

TEST(pack, buffers_are_real_disjoint_memory_freed_as_one) {
  gpumem::testing::host_backed_resource upstream;
  std::mt19937_64 rng(99);
  for (int round = 0; round < 50; ++round) {
    const auto reqs = random_requests(rng);
    {
      gpumem::pack<gpumem::testing::host_backed_resource> p(upstream, reqs, gpumem::stream_ref{3});
      ASSERT_EQ(p.size(), reqs.size());
      const bool any_bytes = p.total_bytes() != 0;
      EXPECT_EQ(upstream.live_count(), any_bytes ? 1u : 0u);
      EXPECT_EQ(reinterpret_cast<std::uintptr_t>(p.base()) % p.alignment(), 0u);
      // Fill each buffer with its own byte, then check none was overwritten by another.
      for (std::size_t i = 0; i < p.size(); ++i) {
        EXPECT_EQ(reinterpret_cast<std::uintptr_t>(p.data(i)) % reqs[i].alignment, 0u);
        EXPECT_EQ(p.bytes(i).size(), reqs[i].bytes);
        std::memset(p.data(i), static_cast<int>(i % 251), reqs[i].bytes);
      }
      for (std::size_t i = 0; i < p.size(); ++i) {
        for (std::byte b : p.bytes(i)) ASSERT_EQ(std::to_integer<int>(b), static_cast<int>(i % 251));
      }
    }
    EXPECT_EQ(upstream.live_count(), 0u);
  }
  EXPECT_EQ(upstream.bad_frees(), 0u);
}

TEST(pack, move_transfers_ownership_and_reset_frees) {
  gpumem::testing::host_backed_resource upstream;
  using pack_t = gpumem::pack<gpumem::testing::host_backed_resource>;
  pack_t a(upstream, {{64, 64}, {100, 8}, {4096, 256}});
  void* base = a.base();
  pack_t b(std::move(a));
  EXPECT_EQ(a.base(), nullptr);
  EXPECT_TRUE(a.empty());
  EXPECT_EQ(b.base(), base);
  EXPECT_EQ(b.as<int>(2), static_cast<int*>(base));  // the 256-aligned one comes first
  pack_t c;
  c = std::move(b);
  EXPECT_EQ(upstream.live_count(), 1u);
  c.reset();
  EXPECT_EQ(upstream.live_count(), 0u);
  EXPECT_EQ(upstream.bad_frees(), 0u);
}
