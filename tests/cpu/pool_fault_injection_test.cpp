// Fault injection (Reliability 3): replay a prefix of a real trace with the simulated device
// refusing its k-th upstream call, for every k from 1 to the number of calls the unfailed replay
// made. After each: the model and the pool's invariants held throughout, the refusal was met
// either by an out_of_memory for that one request or by the pool's own release-wait-retry, nothing
// leaks (all freed + trim -> the device holds 0 bytes), and later requests succeed.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <unordered_map>

#include <fmt/format.h>

#include "gpumem/trace.hpp"
#include "support/pool_model.hpp"

namespace {

using namespace gpumem;
using gpumem::test::sim_pool_rig;

constexpr std::size_t prefix_rows = 6000;

struct outcome {
  std::uint64_t ooms = 0;
  std::uint64_t pool_calls = 0;     // the pool's upstream calls, refused ones included
  std::uint64_t device_calls = 0;   // calls the device served
};

outcome replay_prefix(const trace& t, bool virtual_memory, std::uint64_t fail_at) {
  sim_pool_rig r(sim_options{.capacity_bytes = std::size_t{80} << 30, .virtual_memory = virtual_memory, .auto_complete = true},
                 pool_options{});
  if (fail_at) r.dev->fail_nth_call(fail_at);
  std::unordered_map<std::uint64_t, void*> ptrs;
  outcome o;
  const std::size_t n = std::min(prefix_rows, t.records.size());
  for (std::size_t i = 0; i < n; ++i) {
    const auto& rec = t.records[i];
    if (rec.action == trace_action::allocate) {
      try {
        ptrs[rec.pointer] = r.allocate(rec.size, default_alignment, stream_ref{rec.stream});
      } catch (const out_of_memory&) {
        ++o.ooms;
      }
    } else if (rec.action == trace_action::free) {
      auto it = ptrs.find(rec.pointer);
      if (it == ptrs.end()) continue;  // its allocation was refused
      r.deallocate(it->second, stream_ref{rec.stream});
      ptrs.erase(it);
    }
    r.model->check_stats();
    if (i % 500 == 0) r.model->check_full();
  }
  r.model->check_full();
  o.pool_calls = r.p->stats().upstream_calls;
  o.device_calls = r.dev->upstream_calls();
  r.free_all_and_trim();
  if (r.dev->used_bytes() != 0) throw std::logic_error(fmt::format("{} B leaked after free + trim", r.dev->used_bytes()));
  // Later requests succeed.
  void* p = r.allocate(std::size_t{64} << 20, default_alignment, stream_ref{});
  r.deallocate(p, stream_ref{});
  r.free_all_and_trim();
  return o;
}

class FaultInjection : public ::testing::TestWithParam<bool> {};

TEST_P(FaultInjection, EveryUpstreamCallOfARealReplayMayFail) {
  const std::filesystem::path path = std::filesystem::path(GPUMEM_SHARED_TRACES) / "bert_infer_varlen.csv.gz";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "no shared trace at " << path;
  const trace t = read_trace(path);
  const outcome clean = replay_prefix(t, GetParam(), 0);
  ASSERT_EQ(clean.ooms, 0u);
  ASSERT_EQ(clean.pool_calls, clean.device_calls);
  const std::uint64_t points = clean.device_calls;
  ASSERT_GT(points, 0u);
  std::uint64_t passed = 0, threw = 0, recovered = 0;
  for (std::uint64_t k = 1; k <= points; ++k) {
    try {
      const outcome o = replay_prefix(t, GetParam(), k);
      // The k-th call was made and refused: the pool made one call more than the device served.
      ASSERT_EQ(o.pool_calls, o.device_calls + 1) << "injection point " << k << " never fired";
      ASSERT_LE(o.ooms, 1u) << "one refusal, then " << o.ooms << " failed requests at point " << k;
      (o.ooms ? threw : recovered) += 1;
      ++passed;
    } catch (const std::exception& e) {
      ADD_FAILURE() << "injection point " << k << ": " << e.what();
    }
  }
  std::printf("fault injection: %llu points tried, %llu passed (%llu threw out_of_memory, %llu recovered by the pool's "
              "retry) [%s, first %zu rows of %s]\n",
              (unsigned long long)points, (unsigned long long)passed, (unsigned long long)threw,
              (unsigned long long)recovered, GetParam() ? "virtual" : "segments", prefix_rows, path.filename().c_str());
  EXPECT_EQ(passed, points);
}

INSTANTIATE_TEST_SUITE_P(Pool, FaultInjection, ::testing::Values(true, false),
                         [](const auto& info) { return info.param ? "Virtual" : "Segments"; });

}  // namespace
