// The stretch library (src/alloc/stretch_library.hpp) and the pool that follows its layouts: a
// stretch is cut where nothing recorded is live, laid out within the bound or not kept, found by
// its first request, kept once however often it comes, the oldest gives way, and one taken up
// wrongly is passed over; on the shared BERT trace the batches that moved memory are placed by
// their layouts when they come again.
#include <gtest/gtest.h>

#include <filesystem>
#include <vector>

#include "gpumem/replay.hpp"
#include "gpumem/trace.hpp"
#include "stretch_library.hpp"

namespace {

using namespace gpumem;
using namespace gpumem::detail;
constexpr std::size_t MiB = std::size_t{1} << 20;

// One stretch: `n` blocks of `size` bytes at addresses from `base`, two live at a time, then all
// freed. Returns whether the last free ended a stretch.
bool record_pairs(stretch_library& lib, std::uintptr_t base, std::size_t n, std::size_t size, stream_ref s = {}) {
  bool ended = false;
  for (std::size_t i = 0; i < n; ++i) {
    EXPECT_EQ(lib.record_alloc(base + i * size, size, 256, s), i == 0) << "only the first opens it";
    if (i > 0) ended = lib.record_free(base + (i - 1) * size);
    EXPECT_FALSE(ended) << "one block is live all along";
  }
  return lib.record_free(base + (n - 1) * size);
}

TEST(StretchLibrary, AStretchEndsWhereNothingIsLiveAndIsKeptWithinItsBound) {
  stretch_library lib;
  ASSERT_TRUE(record_pairs(lib, 0x10000000, 16, 4 * MiB));
  EXPECT_TRUE(lib.quiet());
  EXPECT_FALSE(lib.keep(7.9 * MiB)) << "two live blocks take 8 MiB";
  ASSERT_TRUE(record_pairs(lib, 0x10000000, 16, 4 * MiB));
  ASSERT_TRUE(lib.keep(8 * MiB));
  const kept_stretch* k = lib.find(4 * MiB, 256, stream_ref{});
  ASSERT_NE(k, nullptr);
  EXPECT_EQ(k->extent, 8 * MiB);
  ASSERT_EQ(k->entries.size(), 16u);
  for (std::size_t i = 1; i < 16; ++i) EXPECT_NE(k->entries[i].offset, k->entries[i - 1].offset) << "two live at a time";
  EXPECT_EQ(lib.find(2 * MiB, 256, stream_ref{}), nullptr) << "found by its first request";
  EXPECT_EQ(lib.find(4 * MiB, 512, stream_ref{}), nullptr);
}

TEST(StretchLibrary, ShortOrOverlongStretchesAreNotKept) {
  stretch_library lib;
  ASSERT_TRUE(record_pairs(lib, 0x10000000, stretch_library::min_requests - 1, MiB * 2));
  EXPECT_FALSE(lib.keep(1e12));
  ASSERT_TRUE(record_pairs(lib, 0x10000000, stretch_library::max_requests + 1, MiB * 2));
  EXPECT_FALSE(lib.keep(1e12));
  EXPECT_EQ(lib.kept(), 0u);
}

TEST(StretchLibrary, TheSameStretchIsKeptOnceAndTheOldestGivesWay) {
  stretch_library lib;
  for (int again = 0; again < 3; ++again) {
    ASSERT_TRUE(record_pairs(lib, 0x10000000, 16, 4 * MiB));
    ASSERT_TRUE(lib.keep(1e12));
  }
  EXPECT_EQ(lib.kept(), 1u);
  // max_kept more of other sizes: the first one (used longest ago) goes.
  for (std::size_t k = 0; k < stretch_library::max_kept; ++k) {
    ASSERT_TRUE(record_pairs(lib, 0x10000000, 16, (5 + k) * MiB));
    ASSERT_TRUE(lib.keep(1e12));
  }
  EXPECT_EQ(lib.kept(), stretch_library::max_kept);
  EXPECT_EQ(lib.find(4 * MiB, 256, stream_ref{}), nullptr);
  EXPECT_NE(lib.find(5 * MiB, 256, stream_ref{}), nullptr);
}

TEST(StretchLibrary, AStretchTakenWronglyIsPassedOverLongerEachTimeInARow) {
  stretch_library lib;
  ASSERT_TRUE(record_pairs(lib, 0x10000000, 16, 4 * MiB));
  ASSERT_TRUE(lib.keep(1e12));
  const std::uint64_t id = lib.find(4 * MiB, 256, {})->id;
  auto found_in = [&](int tries) {
    int n = 0;
    for (int i = 0; i < tries; ++i) n += lib.find(4 * MiB, 256, {}) != nullptr;
    return n;
  };
  lib.judge(id, false);
  EXPECT_EQ(found_in(2), 1) << "passed over once";
  lib.judge(id, false);
  EXPECT_EQ(found_in(3), 1) << "then twice";
  lib.judge(id, true);
  EXPECT_EQ(found_in(3), 3) << "followed: taken each time again";
}

TEST(StretchLibrary, HowFarIntoAStretchIsCounted) {
  stretch_library lib;
  EXPECT_EQ(lib.into_stretch(), 0u);
  lib.record_alloc(0x10000000, 4 * MiB, 256, {});
  lib.record_alloc(0x20000000, 4 * MiB, 256, {});
  EXPECT_EQ(lib.into_stretch(), 2u);
  lib.record_free(0x10000000);
  EXPECT_TRUE(lib.record_free(0x20000000));
  EXPECT_EQ(lib.into_stretch(), 0u) << "quiet again";
}

TEST(StretchLibrary, AnAddressRecordedAgainClosesItsOldBlock) {
  // A free that went by another path: the block it freed ended when its address came back.
  stretch_library lib;
  lib.record_alloc(0x10000000, 4 * MiB, 256, {});
  for (std::size_t i = 1; i < 10; ++i) lib.record_alloc(0x10000000, 4 * MiB, 256, {});
  ASSERT_TRUE(lib.record_free(0x10000000));
  ASSERT_TRUE(lib.keep(4 * MiB)) << "one block live at a time";
}

// The shared BERT trace: its largest batch moves memory on the arena at the reserve ceiling every
// time it comes. From the third pass on it, and the other batches that moved, are placed by the
// layouts kept from the passes before: a few granules a pass, where the arena moved over a
// thousand.
TEST(PoolStretches, BertsLaterPassesMoveAlmostNothing) {
  const std::filesystem::path path = std::filesystem::path(GPUMEM_SHARED_TRACES) / "bert_infer_varlen.csv.gz";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "no shared trace bert_infer_varlen.csv.gz in " << GPUMEM_SHARED_TRACES;
  replay_options o;
  o.passes = 4;
  const replay_result r = replay(read_trace(path), o);
  ASSERT_EQ(r.pass_log.size(), 4u);
  EXPECT_EQ(r.failed_allocs, 0u);
  EXPECT_LE(r.fragmentation, 1.03);
  EXPECT_GT(r.stats.plans, 10u) << "stretches taken up";
  const std::uint64_t peak_granules = r.peak_reserved_bytes / (2 * MiB);
  for (std::size_t p = 2; p < 4; ++p) {
    const std::uint64_t moved = r.pass_log[p].driver_granules - r.pass_log[p - 1].driver_granules;
    EXPECT_LT(moved, peak_granules / 4) << "pass " << p + 1;
  }
}

}  // namespace
