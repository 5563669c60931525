// The soak's integrity checks (replay_options.check_integrity): clean targets pass with zero
// mismatches and flat reserved memory; targets broken on purpose — overlapping blocks, misaligned
// blocks, a live block scribbled over — are caught. All on the simulated device or host memory.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "gpumem/replay.hpp"
#include "gpumem/trace.hpp"
#include "support/wrapped_replay_target.hpp"

namespace gpumem {
namespace {

using testing_support::make_inner_target;
using testing_support::scribbling_replay_target;
using testing_support::wrapped_replay_target;

const std::string examples = GPUMEM_EXAMPLES;

replay_options soak(const std::string& resource, std::size_t passes, std::size_t verify_every) {
  replay_options o;
  o.resource = resource;
  o.passes = passes;
  o.check_integrity = true;
  o.verify_every = verify_every;
  return o;
}

std::uint64_t allocations_with_bytes(const trace& t) {
  std::uint64_t n = 0;
  for (const auto& r : t.records) n += r.action == trace_action::allocate && r.size > 0;
  return n;
}

// A small trace of real-memory-friendly sizes (≤ 64 KiB), random frees, on one stream.
trace synthetic_trace(std::size_t allocations) {
  trace t;
  t.name = "synthetic";
  std::mt19937_64 rng(7);
  std::vector<std::uint64_t> live;
  std::uint64_t next_ptr = 0x10000;
  for (std::size_t i = 0; i < allocations; ++i) {
    const std::uint64_t size = 1 + rng() % 65536;
    t.records.push_back({0, -1, trace_action::allocate, next_ptr, size, 0});
    live.push_back(next_ptr);
    next_ptr += 0x20000;
    if (live.size() > 16 || rng() % 2) {
      const std::size_t k = rng() % live.size();
      t.records.push_back({0, -1, trace_action::free, live[k], 0, 0});
      live.erase(live.begin() + std::ptrdiff_t(k));
    }
  }
  for (auto p : live) t.records.push_back({0, -1, trace_action::free, p, 0, 0});
  return t;
}

class clean_soak : public ::testing::TestWithParam<const char*> {};

// Several passes of bundled examples with every block verified: nothing overlaps, nothing changes
// under a live block, and reserved memory after the first pass stays where it was.
TEST_P(clean_soak, examples_pass_with_zero_mismatches_and_flat_reserved) {
  for (const char* name : {"small_training.csv", "vision_two_streams.csv"}) {
    SCOPED_TRACE(name);
    const trace t = read_trace(examples + "/" + name);
    const replay_result r = replay(t, soak(GetParam(), 4, 1));
    EXPECT_TRUE(r.integrity_checked);
    EXPECT_EQ(r.failed_allocs, 0u);
    EXPECT_EQ(r.integrity_mismatches(), 0u);
    EXPECT_TRUE(r.integrity_notes.empty()) << r.integrity_notes.front();
    EXPECT_EQ(r.overlap_checks, 4 * allocations_with_bytes(t));
    EXPECT_EQ(r.verified_blocks, 4 * allocations_with_bytes(t));  // verify_every 1: all of them
    EXPECT_EQ(r.passes, 4u);
    ASSERT_EQ(r.pass_log.size(), 4u);
    EXPECT_GT(r.reserved_after_first_pass_bytes, 0u);
    // Flat: later passes peak at most 1 % or two granules above the first (the pool may still
    // settle a little), whichever is more.
    const std::size_t base = r.reserved_after_first_pass_bytes;
    EXPECT_LE(r.max_reserved_later_passes_bytes, base + std::max(base / 100, 2 * default_granularity));
    for (const auto& p : r.pass_log) EXPECT_LE(p.peak_reserved_bytes, r.max_reserved_later_passes_bytes);
  }
}

INSTANTIATE_TEST_SUITE_P(sim_targets, clean_soak, ::testing::Values("pool", "pool-segments", "exact"));

// Real memory: the host verifier writes and reads the very pattern the GPU kernels use.
TEST(replay_soak, malloc_target_stamps_and_checks_real_memory_cleanly) {
  const trace t = synthetic_trace(2000);
  const replay_result r = replay(t, soak("malloc", 2, 3));
  EXPECT_EQ(r.integrity_mismatches(), 0u);
  EXPECT_GT(r.verified_blocks, 2 * 2000 / 3 - 2);
}

TEST(replay_soak, sampling_verifies_every_kth_allocation) {
  const trace t = read_trace(examples + "/small_training.csv");
  const std::uint64_t allocs = 3 * allocations_with_bytes(t);
  const replay_result r = replay(t, soak("pool", 3, 16));
  EXPECT_EQ(r.integrity_mismatches(), 0u);
  EXPECT_NEAR(double(r.verified_blocks), double(allocs) / 16, 2.0);
  const replay_result off = replay(t, soak("pool", 3, 0));
  EXPECT_EQ(off.verified_blocks, 0u);
  EXPECT_EQ(off.overlap_checks, allocs);  // the host checks run without the data check
}

TEST(replay_soak, min_ops_runs_enough_passes) {
  const trace t = read_trace(examples + "/small_training.csv");
  const std::uint64_t per_pass = replay(t, replay_options{}).ops;
  replay_options o;
  o.min_ops = 5 * per_pass + 1;
  const replay_result r = replay(t, o);
  EXPECT_EQ(r.passes, 6u);
  EXPECT_EQ(r.ops, 6 * per_pass);
  EXPECT_GE(r.ops, o.min_ops);
}

// Each pass's entry says what the slow path has done so far: counts that only grow, the last one
// the pool's own totals, and the time since the soak began.
TEST(replay_soak, pass_log_counts_the_slow_path_so_far) {
  const trace t = read_trace(examples + "/varlen_inference.csv");
  replay_options o;
  o.passes = 4;
  const replay_result r = replay(t, o);
  ASSERT_EQ(r.pass_log.size(), 4u);
  for (std::size_t i = 1; i < r.pass_log.size(); ++i) {
    EXPECT_GE(r.pass_log[i].granules_moved, r.pass_log[i - 1].granules_moved);
    EXPECT_GE(r.pass_log[i].map_unmap_calls, r.pass_log[i - 1].map_unmap_calls);
    EXPECT_GE(r.pass_log[i].seconds, r.pass_log[i - 1].seconds);
  }
  EXPECT_GT(r.pass_log.front().granules_moved, 0u) << "the first pass maps what it grows";
  // The last pass's entry is taken before the trace's leftovers are given back; nothing the
  // example leaves live at its end moves granules on the way out, so the totals agree.
  EXPECT_EQ(r.pass_log.back().granules_moved, r.stats.maps + r.stats.unmaps);
  EXPECT_EQ(r.pass_log.back().map_unmap_calls, r.stats.map_calls + r.stats.unmap_calls);
  EXPECT_GT(r.pass_log.back().seconds, 0.0);
}

// Every 50th block lands inside the block handed out just before it, while that one is live.
struct overlapping_target : wrapped_replay_target {
  overlapping_target() : wrapped_replay_target(make_inner_target("pool")) {}
  void* allocate(std::size_t bytes, stream_ref s) override {
    void* p = inner->allocate(bytes, s);
    if (++count % 50 == 0 && last && last_bytes >= 512 && p) {
      inner->deallocate(p, bytes, s);
      p = static_cast<char*>(last) + 256;
      fake.insert(p);
    }
    last = p;
    last_bytes = bytes;
    return p;
  }
  void deallocate(void* p, std::size_t bytes, stream_ref s) override {
    if (p == last) last = nullptr;
    if (fake.erase(p) == 0) inner->deallocate(p, bytes, s);
  }
  std::uint64_t count = 0;
  void* last = nullptr;
  std::size_t last_bytes = 0;
  std::set<void*> fake;
};

TEST(replay_soak, overlapping_blocks_are_caught_and_described) {
  register_replay_target("test-overlapping", [](const replay_options&) { return std::make_unique<overlapping_target>(); });
  const trace t = read_trace(examples + "/small_training.csv");
  const replay_result r = replay(t, soak("test-overlapping", 2, 1));
  EXPECT_GT(r.overlaps, 0u);
  EXPECT_GT(r.mismatched_words, 0u);  // the shadow saw the newcomer's stamp over the live block
  EXPECT_EQ(r.misaligned, 0u);
  ASSERT_FALSE(r.integrity_notes.empty());
  EXPECT_NE(r.integrity_notes.front().find("overlaps live block"), std::string::npos) << r.integrity_notes.front();
  EXPECT_NE(r.integrity_notes.front().find("line "), std::string::npos) << r.integrity_notes.front();
}

// Hands out every block 16 bytes past what the pool gave (never dereferenced: simulated addresses).
struct misaligned_target : wrapped_replay_target {
  misaligned_target() : wrapped_replay_target(make_inner_target("exact")) {}
  void* allocate(std::size_t bytes, stream_ref s) override {
    void* p = inner->allocate(bytes, s);
    return p ? static_cast<char*>(p) + 16 : nullptr;
  }
  void deallocate(void* p, std::size_t bytes, stream_ref s) override { inner->deallocate(static_cast<char*>(p) - 16, bytes, s); }
};

TEST(replay_soak, misaligned_blocks_are_caught) {
  register_replay_target("test-misaligned", [](const replay_options&) { return std::make_unique<misaligned_target>(); });
  const trace t = read_trace(examples + "/small_training.csv");
  const replay_result r = replay(t, soak("test-misaligned", 1, 0));
  EXPECT_EQ(r.misaligned, allocations_with_bytes(t));
  EXPECT_EQ(r.overlaps, 0u);
  ASSERT_FALSE(r.integrity_notes.empty());
  EXPECT_NE(r.integrity_notes.front().find("not aligned to 256 B"), std::string::npos) << r.integrity_notes.front();
}

// Real host memory; every 25th allocation scribbles over the block handed out just before it.
std::unique_ptr<replay_target> make_scribbling_target() {
  return std::make_unique<scribbling_replay_target>(make_inner_target("malloc"), 25,
                                                    [](void* p, std::size_t bytes, stream_ref) { std::memset(p, 0xA5, bytes); });
}

TEST(replay_soak, a_live_block_written_by_someone_else_is_caught) {
  register_replay_target("test-scribbling", [](const replay_options&) { return make_scribbling_target(); });
  const trace t = synthetic_trace(2000);
  const replay_result r = replay(t, soak("test-scribbling", 1, 1));
  EXPECT_EQ(r.overlaps, 0u);
  EXPECT_GT(r.mismatched_words, 0u);
  ASSERT_FALSE(r.integrity_notes.empty());
  EXPECT_NE(r.integrity_notes.front().find("no longer held their pattern"), std::string::npos) << r.integrity_notes.front();
}

}  // namespace
}  // namespace gpumem
