// The trace adaptor: a workload recorded through it reads back as a valid trace that replays to the
// same figures as the original.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "gpumem/pool.hpp"
#include "gpumem/replay.hpp"
#include "gpumem/sim_device.hpp"
#include "gpumem/trace.hpp"
#include "gpumem/trace_adaptor.hpp"
#include "support/temp_path.hpp"

namespace gpumem {
namespace {

static_assert(resource<trace_adaptor<pool>>);

std::filesystem::path temp_file(const std::string& name) {
  return testing_support::unique_temp_path(name, ".csv");
}

// The same pool configuration `replay` uses for resource "pool".
struct sim_pool {
  replay_options opts;
  sim_device dev{sim_options{.capacity_bytes = opts.capacity_bytes,
                             .granularity_bytes = default_granularity,
                             .virtual_memory = true,
                             .auto_complete = true}};
  pool p{dev.memory(), dev.streams(), opts.pool};
};

TEST(TraceRoundtrip, ReplayOfVarlenInferenceThroughAdaptorReplaysTheSame) {
  const trace original = read_trace(std::filesystem::path(GPUMEM_EXAMPLES) / "varlen_inference.csv");
  const replay_options opts;  // resource "pool", the default configuration
  const replay_result want = replay(original, opts);

  const auto file = temp_file("gpumem_trace_roundtrip");
  std::uint64_t recorded_rows = 0;
  {
    sim_pool sp;
    trace_adaptor<pool> traced(sp.p, file);
    std::unordered_map<std::uint64_t, void*> live;  // the original's pointer -> ours
    for (const trace_record& r : original.records) {
      if (r.action == trace_action::allocate) {
        live[r.pointer] = traced.allocate(r.size, default_alignment, stream_ref{r.stream});
      } else if (r.action == trace_action::free) {
        auto it = live.find(r.pointer);
        ASSERT_NE(it, live.end());
        traced.deallocate(it->second, r.size, default_alignment, stream_ref{r.stream});
        live.erase(it);
      }
    }
    // What the original leaves live stays live in the recording too: the leftovers are given back
    // to the pool directly below, not through the adaptor.
    recorded_rows = traced.rows();
    traced.flush();
    // Give the leftovers back upstream directly so the pool's destructor has nothing live.
    for (auto& [orig, p] : live) {
      const auto rec = std::find_if(original.records.rbegin(), original.records.rend(),
                                    [&](const trace_record& r) {
                                      return r.action == trace_action::allocate && r.pointer == orig;
                                    });
      sp.p.deallocate(p, rec->size, default_alignment, stream_ref{rec->stream});
    }
  }

  const trace recorded = read_trace(file);  // throws on any invalid row or semantics
  std::filesystem::remove(file);
  EXPECT_EQ(recorded.records.size(), recorded_rows);
  EXPECT_EQ(recorded.records.size(), original.records.size());
  const replay_result got = replay(recorded, opts);
  EXPECT_EQ(got.ops, want.ops);
  EXPECT_EQ(got.peak_live_bytes, want.peak_live_bytes);
  EXPECT_EQ(got.peak_reserved_bytes, want.peak_reserved_bytes);
  EXPECT_DOUBLE_EQ(got.fragmentation, want.fragmentation);
  EXPECT_EQ(got.failed_allocs, want.failed_allocs);
  for (std::size_t i = 0; i < recorded.records.size(); ++i) {
    ASSERT_EQ(recorded.records[i].action, original.records[i].action) << "row " << i;
    ASSERT_EQ(recorded.records[i].size, original.records[i].size) << "row " << i;
    ASSERT_EQ(recorded.records[i].stream, original.records[i].stream) << "row " << i;
    ASSERT_GE(recorded.records[i].time_us, 0) << "row " << i;
  }
}

// Random allocations and frees on two streams from two threads: the recording is a valid trace
// (a free is always recorded before its address can be handed out again), has each thread's own
// number, and replays to the live peak the workload had.
TEST(TraceRoundtrip, TwoThreadsTwoStreamsRecordAValidTrace) {
  std::ostringstream out;
  sim_pool sp;
  std::atomic<std::uint64_t> ops{0};
  {
    trace_adaptor<pool> traced(sp.p, out, {.buffer_bytes = 4096});
    auto work = [&](unsigned seed, stream_ref s) {
      std::mt19937_64 rng(seed);
      std::vector<std::pair<void*, std::size_t>> mine;
      for (int i = 0; i < 3000; ++i) {
        if (!mine.empty() && (rng() % 100 < 45 || mine.size() > 100)) {
          const std::size_t k = rng() % mine.size();
          traced.deallocate(mine[k].first, mine[k].second, default_alignment, s);
          ++ops;
          mine[k] = mine.back();
          mine.pop_back();
        } else {
          const std::size_t bytes = std::size_t{256} << (rng() % 14);
          mine.emplace_back(traced.allocate(bytes, default_alignment, s), bytes);
          ++ops;
        }
      }
      for (auto& [p, b] : mine) {
        traced.deallocate(p, b, default_alignment, s);
        ++ops;
      }
    };
    std::thread a(work, 1u, stream_ref{0x10});
    std::thread b(work, 2u, stream_ref{0x20});
    a.join();
    b.join();
    EXPECT_EQ(traced.rows(), ops.load());
  }
  std::istringstream in(out.str());
  const trace t = parse_trace(in, "two_threads");
  ASSERT_EQ(t.records.size(), ops.load());
  std::set<std::uint64_t> threads;
  std::unordered_map<std::uint64_t, std::uint64_t> stream_of_thread;
  std::int64_t last_time = -1;
  for (const trace_record& r : t.records) {
    threads.insert(r.thread);
    auto [it, inserted] = stream_of_thread.try_emplace(r.thread, r.stream);
    EXPECT_EQ(it->second, r.stream);  // each thread used its own stream
    // Rows are in time order (a step back is only the clock passing midnight).
    if (last_time >= 0 && r.time_us < last_time) {
      EXPECT_GT(last_time - r.time_us, 43200000000LL);
    }
    last_time = r.time_us;
  }
  EXPECT_EQ(threads.size(), 2u);
  const replay_result got = replay(t, replay_options{});
  EXPECT_EQ(got.ops, ops.load());
  EXPECT_GT(got.peak_live_bytes, 0u);
  EXPECT_EQ(got.failed_allocs, 0u);
}

TEST(TraceRoundtrip, OutOfMemoryIsRecordedAsAllocateFailureAndRethrown) {
  sim_device dev(sim_options{.auto_complete = true});
  pool p(dev.memory(), dev.streams(), pool_options{.max_reserved_bytes = std::size_t{8} << 20});
  std::ostringstream out;
  {
    trace_adaptor<pool> traced(p, out, {.buffer_bytes = 0});
    void* ok = traced.allocate(4096, default_alignment, stream_ref{7});
    EXPECT_THROW(traced.allocate(std::size_t{64} << 20, default_alignment, stream_ref{7}), out_of_memory);
    traced.deallocate(ok, 4096, default_alignment, stream_ref{7});
  }
  std::istringstream in(out.str());
  const trace t = parse_trace(in, "oom");
  ASSERT_EQ(t.records.size(), 3u);
  EXPECT_EQ(t.records[0].action, trace_action::allocate);
  EXPECT_EQ(t.records[1].action, trace_action::allocate_failure);
  EXPECT_EQ(t.records[1].size, std::size_t{64} << 20);
  EXPECT_EQ(t.records[1].stream, 7u);
  EXPECT_EQ(t.records[2].action, trace_action::free);
  EXPECT_EQ(out.str().rfind("Thread,Time,Action,Pointer,Size,Stream\n", 0), 0u);
}

TEST(TraceRoundtrip, UnwritablePathThrows) {
  sim_device dev;
  pool p(dev.memory(), dev.streams());
  EXPECT_THROW(trace_adaptor<pool>(p, std::filesystem::path("/nonexistent_dir/x/trace.csv")),
               std::runtime_error);
}

}  // namespace
}  // namespace gpumem
