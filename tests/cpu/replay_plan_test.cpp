// The replay plan (a trace made ready before any clock starts) and the shared loop over it: slots
// reused as blocks go, streams numbered densely in order of first use with 0 kept for the default
// stream, rows that ask nothing of an allocator dropped (failures still counted), and the loop
// handing an allocator exactly the plan's requests on the streams it was given.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <stdexcept>
#include <tuple>
#include <vector>

#include "gpumem/detail/replay_loop.hpp"
#include "gpumem/detail/replay_plan.hpp"
#include "gpumem/trace.hpp"

namespace gpumem {
namespace {

trace_record row(trace_action a, std::uint64_t pointer, std::uint64_t size, std::uint64_t stream) {
  return {0, -1, a, pointer, size, stream};
}
constexpr auto alloc = trace_action::allocate;
constexpr auto free_ = trace_action::free;
constexpr auto failure = trace_action::allocate_failure;

// Two streams besides the default one, a failure row, a free of a pointer never allocated (on a
// stream no kept row uses), and a free row whose Size is not the allocation's.
trace small_trace() {
  trace t;
  t.name = "small";
  t.records = {
      row(alloc, 0xa000, 100, 0x5),  // 0: slot 0, stream 0x5 first: index 1
      row(alloc, 0xb000, 200, 0),    // 1: slot 1, the default stream: index 0
      row(free_, 0xa000, 0, 0x5),    // 2: slot 0 freed, 100 bytes
      row(failure, 0, 999, 0x9),     // 3: dropped, counted; its stream is not numbered
      row(alloc, 0xc000, 300, 0x7),  // 4: reuses slot 0; stream 0x7: index 2
      row(free_, 0xdead, 0, 0x8),    // 5: never allocated: dropped, its stream not numbered
      row(free_, 0xb000, 0, 0x7),    // 6: slot 1 freed on another stream than its allocation's
      row(alloc, 0xd000, 50, 0x5),   // 7: reuses slot 1; left live at the end
      row(free_, 0xc000, 7, 0x7),    // 8: slot 0 freed; the op keeps the allocation's 300 bytes
  };
  return t;
}

using op_fields = std::tuple<std::uint64_t, std::uint32_t, std::uint32_t, std::uint32_t, bool>;
op_fields fields(const replay_plan::op& o) { return {o.size, o.slot, o.stream, o.row, o.alloc}; }

TEST(replay_plan, slots_streams_and_dropped_rows) {
  const replay_plan plan = make_replay_plan(small_trace());
  EXPECT_EQ(plan.rows, 9u);
  EXPECT_EQ(plan.trace_failures, 1u);
  EXPECT_EQ(plan.slots, 2u);
  EXPECT_EQ(plan.peak_live_bytes, 500u);  // rows 1 and 4: 200 + 300
  EXPECT_EQ(plan.streams, (std::vector<std::uint64_t>{0, 0x5, 0x7}));
  const std::vector<op_fields> want{
      {100, 0, 1, 0, true}, {200, 1, 0, 1, true}, {100, 0, 1, 2, false}, {300, 0, 2, 4, true},
      {200, 1, 2, 6, false}, {50, 1, 1, 7, true},  {300, 0, 2, 8, false},
  };
  std::vector<op_fields> got;
  for (const auto& o : plan.ops) got.push_back(fields(o));
  EXPECT_EQ(got, want);
}

TEST(replay_plan, the_default_stream_keeps_index_zero_when_the_trace_never_uses_it) {
  trace t;
  t.records = {row(alloc, 1, 10, 0x42), row(alloc, 2, 10, 0x41), row(free_, 1, 0, 0x42)};
  const replay_plan plan = make_replay_plan(t);
  EXPECT_EQ(plan.streams, (std::vector<std::uint64_t>{0, 0x42, 0x41}));
  ASSERT_EQ(plan.ops.size(), 3u);
  EXPECT_EQ(plan.ops[0].stream, 1u);
  EXPECT_EQ(plan.ops[1].stream, 2u);
  EXPECT_EQ(plan.ops[2].stream, 1u);
}

TEST(replay_plan, an_empty_trace_plans_nothing) {
  const replay_plan plan = make_replay_plan(trace{});
  EXPECT_TRUE(plan.ops.empty());
  EXPECT_EQ(plan.slots, 0u);
  EXPECT_EQ(plan.streams, (std::vector<std::uint64_t>{0}));
}

std::vector<stream_ref> streams(std::initializer_list<int> values) {
  std::vector<stream_ref> out;
  for (int v : values) out.push_back(stream_ref{v});
  return out;
}

// Records every call; hands out distinct fake addresses, and nullptr for `refuse` bytes.
struct recording_allocator {
  struct call {
    bool alloc;
    std::uintptr_t p;
    std::size_t bytes;
    std::uintptr_t s;  // the stream's value
    bool operator==(const call&) const = default;
  };
  std::vector<call> calls;
  std::uintptr_t next = 0x1000;
  std::size_t refuse = SIZE_MAX;
  void* alloc(std::size_t bytes, stream_ref s) {
    const std::uintptr_t p = bytes == refuse ? 0 : next;
    if (p) next += 0x1000;
    calls.push_back({true, p, bytes, s.value()});
    return reinterpret_cast<void*>(p);
  }
  void free(void* p, std::size_t bytes, stream_ref s) {
    calls.push_back({false, reinterpret_cast<std::uintptr_t>(p), bytes, s.value()});
  }
};

TEST(replay_loop, hands_the_allocator_the_plan_on_its_streams_and_frees_leftovers_where_allocated) {
  const replay_plan plan = make_replay_plan(small_trace());
  recording_allocator a;
  replay_loop<recording_allocator> loop(a, plan, streams({10, 15, 17}));  // the allocator's streams for 0, 0x5, 0x7
  loop.run();
  using c = recording_allocator::call;
  const std::vector<c> pass{
      {true, 0x1000, 100, 15}, {true, 0x2000, 200, 10}, {false, 0x1000, 100, 15}, {true, 0x3000, 300, 17},
      {false, 0x2000, 200, 17}, {true, 0x4000, 50, 15},  {false, 0x3000, 300, 17},
  };
  EXPECT_EQ(a.calls, pass);
  EXPECT_EQ(loop.failed_allocs(), 0u);
  a.calls.clear();
  loop.free_live();
  EXPECT_EQ(a.calls, (std::vector<c>{{false, 0x4000, 50, 15}}));  // on its allocation's stream
  a.calls.clear();
  loop.free_live();
  EXPECT_TRUE(a.calls.empty()) << "nothing is left to free";
}

TEST(replay_loop, runs_in_pieces_as_in_one_and_counts_refusals_without_freeing_them) {
  const replay_plan plan = make_replay_plan(small_trace());
  recording_allocator whole, pieces;
  whole.refuse = pieces.refuse = 300;
  replay_loop<recording_allocator> one(whole, plan, streams({0, 1, 2})), split(pieces, plan, streams({0, 1, 2}));
  one.run();
  for (std::size_t i = 0; i < plan.ops.size(); i += 3) split.run(i, std::min(plan.ops.size(), i + 3));
  EXPECT_EQ(whole.calls, pieces.calls);
  EXPECT_EQ(split.failed_allocs(), 1u);
  for (const auto& call : pieces.calls) EXPECT_FALSE(!call.alloc && call.p == 0) << "a refused block was freed";
}

TEST(replay_loop, needs_a_stream_for_each_stream_of_the_plan) {
  const replay_plan plan = make_replay_plan(small_trace());
  recording_allocator a;
  EXPECT_THROW(replay_loop<recording_allocator>(a, plan, streams({0, 1})), std::invalid_argument);
}

// The second pass starts from empty slots: the same requests again, on the same streams.
TEST(replay_loop, a_second_pass_after_free_live_repeats_the_first) {
  const replay_plan plan = make_replay_plan(small_trace());
  recording_allocator a;
  replay_loop<recording_allocator> loop(a, plan, streams({0, 1, 2}));
  loop.run();
  const std::size_t first = a.calls.size();
  loop.free_live();
  const std::size_t freed = a.calls.size() - first;
  loop.run();
  ASSERT_EQ(a.calls.size(), 2 * first + freed);
  for (std::size_t i = 0; i < first; ++i) {
    const auto &x = a.calls[i], &y = a.calls[first + freed + i];
    EXPECT_EQ(std::tie(x.alloc, x.bytes, x.s), std::tie(y.alloc, y.bytes, y.s)) << "call " << i;
  }
}

}  // namespace
}  // namespace gpumem
