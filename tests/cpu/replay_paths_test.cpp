// gpumem::replay's two paths, the lean loop and the general row-at-a-time one (forced here by a
// timeline, the segment map or integrity checks), hand the target the same requests: every figure
// but time agrees. And each trace stream is resolved to a target stream once, not per row.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "gpumem/replay.hpp"
#include "gpumem/detail/replay_plan.hpp"
#include "gpumem/trace.hpp"
#include "support/wrapped_replay_target.hpp"

namespace gpumem {
namespace {

// Three streams, sizes up to 64 MiB so the pool grows, moves and reuses granules, frees on other
// streams than the allocation's, failure rows, frees of pointers never allocated, and blocks left
// live at the end for a soak to give back between passes.
trace multi_stream_trace() {
  trace t;
  t.name = "multi-stream";
  std::mt19937_64 rng(11);
  const std::uint64_t streams[] = {0, 0x51, 0x52};
  std::vector<std::uint64_t> live;
  std::uint64_t next_ptr = 0x100000;
  for (int i = 0; i < 3000; ++i) {
    const std::uint64_t stream = streams[rng() % 3];
    if (rng() % 97 == 0) t.records.push_back({0, -1, trace_action::allocate_failure, 0, 1 + rng() % 4096, stream});
    if (rng() % 89 == 0) t.records.push_back({0, -1, trace_action::free, 0xdead0000 + rng() % 64, 0, stream});
    if (live.size() < 40 || rng() % 2) {
      const std::uint64_t size = rng() % 8 == 0 ? (1 + rng() % 64) << 20 : 1 + rng() % 300000;
      t.records.push_back({0, -1, trace_action::allocate, next_ptr, size, stream});
      live.push_back(next_ptr);
      next_ptr += 0x10000000;
    } else {
      const std::size_t k = rng() % live.size();
      t.records.push_back({0, -1, trace_action::free, live[k], 0, stream});
      live.erase(live.begin() + std::ptrdiff_t(k));
    }
  }
  return t;  // what is still in `live` stays live
}

void expect_same_figures(const replay_result& lean, const replay_result& general) {
  EXPECT_EQ(lean.ops, general.ops);
  EXPECT_EQ(lean.failed_allocs, general.failed_allocs);
  EXPECT_EQ(lean.trace_failures, general.trace_failures);
  EXPECT_EQ(lean.peak_live_bytes, general.peak_live_bytes);
  EXPECT_EQ(lean.peak_reserved_bytes, general.peak_reserved_bytes);
  EXPECT_EQ(lean.final_reserved_bytes, general.final_reserved_bytes);
  EXPECT_EQ(lean.reserved_after_first_pass_bytes, general.reserved_after_first_pass_bytes);
  EXPECT_EQ(lean.max_reserved_later_passes_bytes, general.max_reserved_later_passes_bytes);
  const pool_stats &a = lean.stats, &b = general.stats;
  EXPECT_EQ(a.peak_live_bytes, b.peak_live_bytes);
  EXPECT_EQ(a.reserved_bytes, b.reserved_bytes);
  EXPECT_EQ(a.cached_bytes, b.cached_bytes);
  EXPECT_EQ(a.allocations, b.allocations);
  EXPECT_EQ(a.deallocations, b.deallocations);
  EXPECT_EQ(a.failed_allocations, b.failed_allocations);
  EXPECT_EQ(a.upstream_calls, b.upstream_calls);
  EXPECT_EQ(a.maps, b.maps);
  EXPECT_EQ(a.unmaps, b.unmaps);
  EXPECT_EQ(a.map_calls, b.map_calls);
  EXPECT_EQ(a.driver_maps, b.driver_maps);
  EXPECT_EQ(a.events_recorded, b.events_recorded);
  EXPECT_EQ(a.front_hits, b.front_hits);
  EXPECT_EQ(a.front_evictions, b.front_evictions);
  ASSERT_EQ(lean.pass_log.size(), general.pass_log.size());
  for (std::size_t i = 0; i < lean.pass_log.size(); ++i) {
    const soak_pass &x = lean.pass_log[i], &y = general.pass_log[i];
    EXPECT_EQ(x.reserved_at_end_bytes, y.reserved_at_end_bytes) << "pass " << i;
    EXPECT_EQ(x.peak_reserved_bytes, y.peak_reserved_bytes) << "pass " << i;
    EXPECT_EQ(x.granules_moved, y.granules_moved) << "pass " << i;
    EXPECT_EQ(x.map_unmap_calls, y.map_unmap_calls) << "pass " << i;
    EXPECT_EQ(x.driver_granules, y.driver_granules) << "pass " << i;
  }
}

struct path_case {
  const char* resource;
  bool small_device;  // three quarters of the trace's peak live bytes: some requests fail
  friend void PrintTo(const path_case& c, std::ostream* os) { *os << c.resource << (c.small_device ? ", small" : ""); }
};

class replay_paths : public ::testing::TestWithParam<path_case> {
 protected:
  replay_options lean_options(const trace& t) const {
    replay_options o;
    o.resource = GetParam().resource;
    if (GetParam().small_device) o.capacity_bytes = make_replay_plan(t).peak_live_bytes / 4 * 3;
    o.passes = 3;
    return o;
  }
  void expect_paths_agree(const trace& t) {
    const replay_result lean = replay(t, lean_options(t));
    if (GetParam().small_device) {
      EXPECT_GT(lean.failed_allocs, 0u) << "the small device refuses some requests";
    }
    EXPECT_GT(lean.ops, 0u);
    {
      SCOPED_TRACE("timeline");
      replay_options o = lean_options(t);
      o.timeline_points = 1;
      const replay_result general = replay(t, o);
      EXPECT_FALSE(general.timeline.empty()) << "the general path keeps the timeline";
      expect_same_figures(lean, general);
    }
    {
      SCOPED_TRACE("segment map");
      replay_options o = lean_options(t);
      o.segment_map_at_peak = true;
      expect_same_figures(lean, replay(t, o));
    }
    {
      SCOPED_TRACE("integrity");
      replay_options o = lean_options(t);
      o.check_integrity = true;
      const replay_result general = replay(t, o);
      EXPECT_TRUE(general.integrity_checked);
      expect_same_figures(lean, general);
    }
  }
};

TEST_P(replay_paths, agree_on_a_hand_built_multi_stream_trace) {
  const trace t = multi_stream_trace();
  expect_paths_agree(t);
  EXPECT_GT(replay(t, lean_options(t)).trace_failures, 0u);
}

TEST_P(replay_paths, agree_on_a_shared_trace) {
  const std::filesystem::path path = std::filesystem::path(GPUMEM_SHARED_TRACES) / "bert_infer_varlen.csv.gz";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "no shared trace at " << path;
  expect_paths_agree(read_trace(path));
}

INSTANTIATE_TEST_SUITE_P(targets, replay_paths,
                         ::testing::Values(path_case{"pool", false}, path_case{"pool", true},
                                           path_case{"pool-segments", false}, path_case{"exact", true}),
                         [](const auto& info) {
                           std::string name = std::string(info.param.resource) + (info.param.small_device ? "_small" : "");
                           for (char& c : name)
                             if (c == '-') c = '_';
                           return name;
                         });

// Counts stream_for calls, by trace stream.
struct stream_counting_target : testing_support::wrapped_replay_target {
  explicit stream_counting_target(std::map<std::uint64_t, int>& calls)
      : wrapped_replay_target(testing_support::make_inner_target("pool")), calls(calls) {}
  stream_ref stream_for(std::uint64_t trace_stream) override {
    ++calls[trace_stream];
    return inner->stream_for(trace_stream);
  }
  std::map<std::uint64_t, int>& calls;
};

TEST(replay_streams, each_trace_stream_is_resolved_once_on_either_path) {
  static std::map<std::uint64_t, int> calls;
  register_replay_target("test-stream-counting",
                         [](const replay_options&) { return std::make_unique<stream_counting_target>(calls); });
  const trace t = multi_stream_trace();
  for (const bool general : {false, true}) {
    SCOPED_TRACE(general ? "general path" : "lean path");
    calls.clear();
    replay_options o;
    o.resource = "test-stream-counting";
    o.passes = 2;
    o.timeline_points = general ? 10 : 0;
    const replay_result r = replay(t, o);
    EXPECT_GT(r.ops, 0u);
    EXPECT_EQ(calls, (std::map<std::uint64_t, int>{{0, 1}, {0x51, 1}, {0x52, 1}}));
  }
}

}  // namespace
}  // namespace gpumem
