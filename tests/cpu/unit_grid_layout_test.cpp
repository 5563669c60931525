// The exact unit-grid layout (src/alloc/unit_grid_layout.hpp): BERT's largest batch laid out at its
// peak where every greedy order takes a unit more; every layout it returns is sound; it says none
// where none beats the bound, where the sizes share no unit small enough, and where its step
// budget runs out.
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <map>
#include <vector>

#include "gpumem/trace.hpp"
#include "step_layout.hpp"
#include "unit_grid_layout.hpp"

namespace {

using namespace gpumem;
using namespace gpumem::detail;
constexpr std::size_t MiB = std::size_t{1} << 20;

// No two blocks live at the same tick overlap, and every block lies below `extent`.
void expect_sound(const std::vector<timed_block>& blocks, const std::vector<std::size_t>& offset, std::size_t extent) {
  ASSERT_EQ(offset.size(), blocks.size());
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    EXPECT_LE(offset[i] + blocks[i].size, extent) << "block " << i;
    for (std::size_t j = i + 1; j < blocks.size(); ++j) {
      const bool together = blocks[i].start < blocks[j].end && blocks[j].start < blocks[i].end;
      const bool apart = offset[i] + blocks[i].size <= offset[j] || offset[j] + blocks[j].size <= offset[i];
      EXPECT_TRUE(!together || apart) << "blocks " << i << " and " << j << " overlap";
    }
  }
}

std::size_t greedy_extent(const std::vector<timed_block>& blocks) {
  std::vector<timed_span> when;
  std::vector<planned_entry> entries;
  std::vector<std::uint32_t> all;
  std::uint64_t period = 0;
  for (const timed_block& b : blocks) {
    all.push_back(static_cast<std::uint32_t>(when.size()));
    when.push_back({b.start, b.end, 0, 0});
    entries.push_back({b.size, 8, stream_ref{}, 0});
    period = std::max(period, b.end);
  }
  std::vector<std::size_t> offset;
  return greedy_layout(when, entries, all, period + 1, offset);
}

// The large blocks of the shared BERT trace's batch with the largest blocks, in request ticks
// (allocations and frees of blocks over 1 MiB), cut where none is live; empty without the trace.
std::vector<timed_block> berts_largest_batch() {
  const std::filesystem::path path = std::filesystem::path(GPUMEM_SHARED_TRACES) / "bert_infer_varlen.csv.gz";
  if (!std::filesystem::exists(path)) return {};
  const trace t = read_trace(path);
  std::vector<timed_block> batch, best;
  std::map<std::uint64_t, std::size_t> live;  // pointer -> index in batch
  std::uint64_t tick = 0, first = 0;
  auto biggest = [](const std::vector<timed_block>& b) {
    std::size_t m = 0;
    for (const timed_block& x : b) m = std::max(m, x.size);
    return m;
  };
  for (const trace_record& r : t.records) {
    if (r.size <= MiB && r.action == trace_action::allocate) continue;
    if (r.action == trace_action::allocate) {
      if (live.empty()) batch.clear(), first = tick;
      live[r.pointer] = batch.size();
      batch.push_back({++tick - first, UINT64_MAX, r.size});
    } else if (r.action == trace_action::free) {
      const auto it = live.find(r.pointer);
      if (it == live.end()) continue;
      batch[it->second].end = ++tick - first;
      live.erase(it);
      if (live.empty() && biggest(batch) > biggest(best)) best = batch;
    }
  }
  return best;
}

TEST(UnitGridLayout, BertsLargestBatchFitsItsPeakWhereGreedyTakesAUnitMore) {
  const std::vector<timed_block> batch = berts_largest_batch();
  if (batch.empty()) GTEST_SKIP() << "no shared trace bert_infer_varlen.csv.gz in " << GPUMEM_SHARED_TRACES;
  ASSERT_EQ(batch.size(), 149u);  // 24 blocks of four units (192 MiB) and 125 of one (48 MiB)
  const std::size_t unit = 48 * MiB;
  EXPECT_EQ(greedy_extent(batch), 12 * unit);
  std::uint64_t steps = std::uint64_t{1} << 20;
  std::vector<std::size_t> offset;
  const std::size_t extent = tightest_unit_grid_layout(batch, 12 * unit, steps, offset);
  EXPECT_EQ(extent, 11 * unit) << "its peak";
  expect_sound(batch, offset, extent);
  // Nothing below the peak, and nothing when the budget is spent first.
  std::uint64_t more = std::uint64_t{1} << 20;
  EXPECT_EQ(tightest_unit_grid_layout(batch, 11 * unit, more, offset), 0u);
  std::uint64_t few = 1000;
  EXPECT_EQ(tightest_unit_grid_layout(batch, 12 * unit, few, offset), 0u);
  EXPECT_EQ(few, 0u);
}

TEST(UnitGridLayout, ASmallCaseIsLaidOutSoundlyAtItsPeak) {
  // Two wide blocks, one after the other, each beside a narrow one: three units, the peak.
  const std::vector<timed_block> blocks = {{0, 4, 2 * MiB}, {1, 6, MiB}, {4, 8, 2 * MiB}, {6, 9, MiB}};
  std::uint64_t steps = 10000;
  std::vector<std::size_t> offset;
  const std::size_t extent = tightest_unit_grid_layout(blocks, 100 * MiB, steps, offset);
  EXPECT_EQ(extent, 3 * MiB);
  expect_sound(blocks, offset, extent);
}

TEST(UnitGridLayout, SizesWithoutACommonUnitSmallEnoughAreLeftAlone) {
  // The sizes' common unit is 1 byte: the peak is millions of units, past the grid's bits.
  const std::vector<timed_block> blocks = {{0, 2, 3 * MiB + 1}, {1, 3, 5 * MiB}};
  std::uint64_t steps = 10000;
  std::vector<std::size_t> offset;
  EXPECT_EQ(tightest_unit_grid_layout(blocks, 100 * MiB, steps, offset), 0u);
  EXPECT_EQ(steps, 10000u) << "no search";
}

}  // namespace
