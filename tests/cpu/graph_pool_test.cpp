// CUDA graph capture on the simulated device: graph pools (gpumem/graph_pool.hpp). A capturing
// stream's blocks come from its graph pool only, its frees are reused there only, no event is ever
// recorded on it while it captures, the pool holds about the capture's peak, and release gives the
// memory back.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "gpumem/pool.hpp"
#include "gpumem/sim_device.hpp"

namespace {

using namespace gpumem;
constexpr std::size_t KiB = std::size_t{1} << 10;
constexpr std::size_t MiB = std::size_t{1} << 20;

// Forwards to the device's ordering; an event recorded on a stream the test marks capturing is a
// violation (on a GPU it would join the graph instead of marking the stream's progress).
class capture_guard final : public ordering {
 public:
  explicit capture_guard(ordering& in) : in_(in) {}
  event_ref record(stream_ref s) override {
    if (capturing.count(s)) violations.push_back("event recorded on capturing stream " + std::to_string(s.value()));
    return in_.record(s);
  }
  bool query(event_ref e) override { return in_.query(e); }
  void synchronize(event_ref e) override { in_.synchronize(e); }
  void stream_wait(stream_ref s, event_ref e) override {
    if (capturing.count(s)) violations.push_back("stream_wait on capturing stream " + std::to_string(s.value()));
    in_.stream_wait(s, e);
  }
  void release(event_ref e) noexcept override { in_.release(e); }
  std::set<stream_ref> capturing;
  std::vector<std::string> violations;

 private:
  ordering& in_;
};

struct rig {
  sim_device dev;
  capture_guard guard;
  pool p;
  explicit rig(bool virtual_memory, bool auto_complete = true, pool_options po = {})
      : dev(sim_options{.capacity_bytes = std::size_t{8} << 30, .virtual_memory = virtual_memory,
                        .auto_complete = auto_complete}),
        guard(dev.streams()),
        p(dev.memory(), guard, po) {}
  void begin(stream_ref s, graph_pool_id g) {
    p.begin_capture(s, g);
    guard.capturing.insert(s);
  }
  void end(stream_ref s) {
    guard.capturing.erase(s);
    p.end_capture(s);
  }
};

struct range {
  std::uintptr_t a;
  std::size_t n;
};
bool overlaps(const range& x, const range& y) { return x.a < y.a + y.n && y.a < x.a + x.n; }
range of(void* p, std::size_t n) { return {reinterpret_cast<std::uintptr_t>(p), n}; }

class GraphPool : public ::testing::TestWithParam<bool> {};  // param: virtual memory

TEST_P(GraphPool, CaptureNeverTouchesMemoryLiveOutsideOrFreedByOtherStreams) {
  rig r(GetParam(), /*auto_complete=*/false);
  const stream_ref A = r.dev.create_stream(), B = r.dev.create_stream(), C = r.dev.create_stream();
  std::vector<range> outside;  // live outside the capture, or freed by other streams (pending)
  std::vector<std::pair<void*, std::size_t>> keep;
  for (std::size_t n : {4 * KiB, 300 * KiB, 3 * MiB, 8 * MiB}) {
    void* p = r.p.allocate(n, A);
    keep.emplace_back(p, n);
    outside.push_back(of(p, n));
    void* q = r.p.allocate(n, B);
    outside.push_back(of(q, n));
    r.p.deallocate(q, n, B);  // B's, pending: its work has not run
  }
  const graph_pool_id g = r.p.create_graph_pool();
  r.begin(C, g);
  EXPECT_EQ(r.p.capture_of(C), g);
  std::vector<std::pair<void*, std::size_t>> in;
  for (std::size_t n : {4 * KiB, 300 * KiB, 3 * MiB, 8 * MiB, std::size_t{512}, 16 * MiB}) {
    void* p = r.p.allocate(n, C);
    ASSERT_NE(p, nullptr);
    EXPECT_TRUE(r.dev.is_mapped(p, n)) << n;
    for (const range& o : outside) EXPECT_FALSE(overlaps(of(p, n), o)) << "a captured block of " << n << " B";
    for (auto& [q, m] : in) EXPECT_FALSE(overlaps(of(p, n), of(q, m))) << "two live captured blocks overlap";
    in.emplace_back(p, n);
  }
  // Other streams during the capture get none of the graph pool's memory.
  for (auto& [p, n] : in) {
    void* q = r.p.allocate(n, A);
    for (auto& [gp, gn] : in) EXPECT_FALSE(overlaps(of(q, n), of(gp, gn)));
    r.p.deallocate(q, n, A);
  }
  r.end(C);
  EXPECT_TRUE(r.guard.violations.empty()) << r.guard.violations.front();
  const graph_pool_stats st = r.p.graph_stats(g);
  EXPECT_EQ(st.blocks, in.size());
  EXPECT_GE(st.reserved_bytes, st.live_bytes);
  for (auto& [p, n] : in) r.p.deallocate(p, n, C);
  for (auto& [p, n] : keep) r.p.deallocate(p, n, A);
  r.p.release_graph_pool(g, C);
  r.p.check_invariants();
}

TEST_P(GraphPool, FreesInsideTheCaptureAreReusedThereOnly) {
  rig r(GetParam());
  const stream_ref C = r.dev.create_stream(), D = r.dev.create_stream();
  const graph_pool_id g = r.p.create_graph_pool(), g2 = r.p.create_graph_pool();
  r.begin(C, g);
  void* x = r.p.allocate(6 * MiB, C);
  void* s = r.p.allocate(2 * KiB, C);
  r.p.deallocate(x, 6 * MiB, C);
  r.p.deallocate(s, 2 * KiB, C);
  void* y = r.p.allocate(6 * MiB, C);
  void* t = r.p.allocate(2 * KiB, C);
  EXPECT_EQ(y, x) << "a block freed inside the capture is reused by the capture at once";
  EXPECT_EQ(t, s);
  r.p.deallocate(y, 6 * MiB, C);
  r.p.deallocate(t, 2 * KiB, C);
  const std::size_t reserved = r.p.graph_stats(g).reserved_bytes;
  r.end(C);
  // Nobody else gets it: ordinary allocations on C, or another graph pool's capture on D.
  std::vector<std::pair<void*, std::size_t>> other;
  for (int i = 0; i < 4; ++i) other.emplace_back(r.p.allocate(6 * MiB, C), 6 * MiB);
  for (int i = 0; i < 4; ++i) other.emplace_back(r.p.allocate(2 * KiB, C), 2 * KiB);
  r.begin(D, g2);
  for (int i = 0; i < 4; ++i) other.emplace_back(r.p.allocate(6 * MiB, D), 6 * MiB);
  for (int i = 0; i < 4; ++i) other.emplace_back(r.p.allocate(2 * KiB, D), 2 * KiB);
  r.end(D);
  for (auto& [p, n] : other) {
    EXPECT_FALSE(overlaps(of(p, n), of(x, 6 * MiB)));
    EXPECT_FALSE(overlaps(of(p, n), of(s, 2 * KiB)));
  }
  EXPECT_EQ(r.p.graph_stats(g).reserved_bytes, reserved) << "the graph pool keeps its memory for the replays";
  for (std::size_t i = 0; i < other.size(); ++i)
    r.p.deallocate(other[i].first, other[i].second, i < 8 ? C : D);
  EXPECT_TRUE(r.guard.violations.empty());
  r.p.check_invariants();
}

// A transformer layer's forward pass, as its activations come and go: (bytes, +1 allocate / -1
// free) by name. T tokens, hidden H, fp32; attention with the scores materialized; layer norms'
// per-token statistics are the small blocks. T = 2048 tokens (a batch of 4 x 512), as serving
// batches come; a T that is no such multiple also costs each block's rounding to granules.
struct step {
  const char* name;
  std::size_t bytes;
  bool alloc;
};
std::vector<step> transformer_layer() {
  const std::size_t T = 2048, H = 1024, heads = 4, f = 4;
  const std::size_t x = T * H * f;
  return {{"ln_stats", T * 2 * f, true}, {"ln", x, true},        {"qkv", 3 * x, true},    {"ln", 0, false},
          {"ln_stats", 0, false},        {"scores", heads * T * T * f / 2, true},         {"probs", heads * T * T * f / 2, true},
          {"scores", 0, false},          {"attn", x, true},      {"probs", 0, false},     {"qkv", 0, false},
          {"proj", x, true},             {"attn", 0, false},     {"h", x, true},          {"proj", 0, false},
          {"ln_stats", T * 2 * f, true}, {"ln2", x, true},       {"ff1", 4 * x, true},    {"ln2", 0, false},
          {"ln_stats", 0, false},        {"act", 4 * x, true},   {"ff1", 0, false},       {"ff2", x, true},
          {"act", 0, false},             {"y", x, true},         {"ff2", 0, false},       {"h", 0, false}};
}

// Runs `steps` on `s` (each name's block freed with its size); returns the blocks left live.
std::map<std::string, std::pair<void*, std::size_t>> run_steps(pool& p, const std::vector<step>& steps, stream_ref s,
                                                              std::size_t& peak) {
  std::map<std::string, std::pair<void*, std::size_t>> live;
  std::size_t now = 0;
  peak = 0;
  for (const step& st : steps) {
    if (st.alloc) {
      live[st.name] = {p.allocate(st.bytes, s), st.bytes};
      now += st.bytes;
      peak = std::max(peak, now);
    } else {
      auto it = live.find(st.name);
      p.deallocate(it->second.first, it->second.second, s);
      now -= it->second.second;
      live.erase(it);
    }
  }
  return live;
}

TEST_P(GraphPool, ReservesAboutTheCapturePeak) {
  rig r(GetParam());
  const stream_ref C = r.dev.create_stream();
  const graph_pool_id g = r.p.create_graph_pool();
  const std::size_t used_before = r.dev.used_bytes();
  r.begin(C, g);
  std::size_t peak = 0;
  auto out = run_steps(r.p, transformer_layer(), C, peak);
  r.end(C);
  const graph_pool_stats st = r.p.graph_stats(g);
  EXPECT_EQ(st.peak_live_bytes, peak);
  const double ratio = static_cast<double>(st.reserved_bytes) / static_cast<double>(peak);
  std::printf("graph pool (%s upstream): reserved %zu B for a capture peak of %zu B: %.3fx, %zu mappings\n",
              GetParam() ? "virtual" : "plain", st.reserved_bytes, peak, ratio, st.mappings);
  EXPECT_EQ(r.dev.used_bytes() - used_before, st.reserved_bytes) << "the graph pool's reserve is what it took";
  // The goal holds where memory can be mapped twice; a plain upstream carves segments best-fit.
  if (GetParam()) {
    EXPECT_LE(ratio, 1.05);
  }
  for (auto& [name, b] : out) r.p.deallocate(b.first, b.second, C);
  r.p.release_graph_pool(g, C);
  EXPECT_EQ(r.dev.used_bytes(), used_before) << "release gives the graph pool's memory back";
  EXPECT_TRUE(r.guard.violations.empty());
}

TEST_P(GraphPool, ReleaseGivesBackFreeMemoryNowAndLiveBlocksWhenFreed) {
  rig r(GetParam());
  const stream_ref C = r.dev.create_stream();
  const graph_pool_id g = r.p.create_graph_pool();
  const std::size_t before = r.dev.used_bytes();
  r.begin(C, g);
  void* a = r.p.allocate(32 * MiB, C);
  void* b = r.p.allocate(64 * KiB, C);
  void* c = r.p.allocate(16 * MiB, C);
  r.p.deallocate(c, 16 * MiB, C);
  r.end(C);
  const std::size_t held = r.dev.used_bytes() - before;
  EXPECT_GE(held, 48 * MiB + 64 * KiB);
  r.p.release_graph_pool(g, C);
  EXPECT_LT(r.dev.used_bytes() - before, held) << "free memory goes back at release";
  EXPECT_GE(r.dev.used_bytes() - before, 32 * MiB) << "a live block stays";
  EXPECT_TRUE(r.p.graph_stats(g).released);
  EXPECT_THROW(r.begin(C, g), std::logic_error);
  r.guard.capturing.clear();
  r.p.deallocate(a, 32 * MiB, C);
  r.p.deallocate(b, 64 * KiB, C);
  EXPECT_EQ(r.dev.used_bytes(), before) << "the last live block's free gives the rest back";
  EXPECT_THROW(r.p.graph_stats(g), std::logic_error) << "a released pool that holds nothing is gone";
}

TEST_P(GraphPool, TwoCapturesShareOnePool) {
  rig r(GetParam());
  const stream_ref C = r.dev.create_stream(), D = r.dev.create_stream();
  const graph_pool_id g = r.p.create_graph_pool();
  std::size_t peak1 = 0, peak2 = 0;
  r.begin(C, g);
  auto out1 = run_steps(r.p, transformer_layer(), C, peak1);
  r.end(C);
  const std::size_t after_first = r.p.graph_stats(g).reserved_bytes;
  // The first graph's output is consumed; its blocks go back to the pool, for the second capture.
  for (auto& [name, b] : out1) r.p.deallocate(b.first, b.second, C);
  r.begin(D, g);
  auto out2 = run_steps(r.p, transformer_layer(), D, peak2);
  r.end(D);
  if (GetParam()) {
    EXPECT_EQ(r.p.graph_stats(g).reserved_bytes, after_first) << "the second capture reuses the first's memory";
  } else {
    EXPECT_LE(r.p.graph_stats(g).reserved_bytes, after_first + 2 * MiB);
  }
  for (auto& [name, b] : out2) r.p.deallocate(b.first, b.second, D);
  r.p.release_graph_pool(g, D);
  EXPECT_TRUE(r.guard.violations.empty());
  r.p.check_invariants();
}

TEST_P(GraphPool, NoEventOnACapturingStreamAndOutsideFreesWaitForTheEnd) {
  rig r(GetParam(), /*auto_complete=*/false);
  const stream_ref C = r.dev.create_stream(), D = r.dev.create_stream();
  // C freed memory before its capture: frees no event covers yet.
  std::vector<void*> before;
  for (int i = 0; i < 6; ++i) before.push_back(r.p.allocate(8 * MiB, C));
  void* outside = r.p.allocate(4 * MiB, C);
  for (void* p : before) r.p.deallocate(p, 8 * MiB, C);
  const graph_pool_id g = r.p.create_graph_pool();
  r.begin(C, g);
  // D wants memory C holds: the pool would cover C's frees with an event; not while C captures.
  std::vector<void*> d;
  for (int i = 0; i < 6; ++i) d.push_back(r.p.allocate(8 * MiB, D));
  void* t = r.p.allocate(1 * MiB, C);
  r.p.deallocate(outside, 4 * MiB, C);  // allocated before the capture: deferred to its end
  r.p.deallocate(t, 1 * MiB, C);
  const std::size_t live_during = r.p.stats().live_bytes;
  EXPECT_TRUE(r.guard.violations.empty()) << r.guard.violations.front();
  r.end(C);
  EXPECT_EQ(r.p.stats().live_bytes, live_during - 4 * MiB) << "the deferred free is done at end_capture";
  for (void* p : d) r.p.deallocate(p, 8 * MiB, D);
  r.dev.complete_all();
  r.p.release_graph_pool(g, C);
  r.p.check_invariants();
}

TEST_P(GraphPool, CommonPathAgainOnceNoCaptureIsUnderway) {
  rig r(GetParam());
  const stream_ref C = r.dev.create_stream();
  void* p = r.p.allocate(64 * KiB, C);
  r.p.deallocate(p, 64 * KiB, C);
  const graph_pool_id g = r.p.create_graph_pool();
  r.begin(C, g);
  void* q = r.p.allocate(64 * KiB, C);
  EXPECT_NE(q, p) << "the front cache's block is not the graph's";
  r.end(C);
  const auto hits = r.p.stats().front_hits;
  void* again = r.p.allocate(64 * KiB, C);
  EXPECT_EQ(again, p);
  EXPECT_EQ(r.p.stats().front_hits, hits + 1) << "the front cache serves again";
  r.p.deallocate(again, 64 * KiB, C);
  r.p.deallocate(q, 64 * KiB, C);
  r.p.release_graph_pool(g, C);
}

TEST_P(GraphPool, MisuseIsAClearError) {
  rig r(GetParam());
  const stream_ref C = r.dev.create_stream();
  auto says = [](auto&& f, const std::string& words) {
    try {
      f();
    } catch (const std::logic_error& e) {
      EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
      return;
    }
    ADD_FAILURE() << "no error; expected one saying \"" << words << "\"";
  };
  says([&] { r.p.end_capture(C); }, "has no capture begun");
  says([&] { r.p.begin_capture(C, 12345); }, "graph pool 12345 does not exist");
  const graph_pool_id g = r.p.create_graph_pool();
  r.begin(C, g);
  says([&] { r.p.begin_capture(C, g); }, "already captures into graph pool");
  says([&] { r.p.release_graph_pool(g); }, "end_capture them first");
  says([&] { r.p.release_stream(C); }, "captures a CUDA graph");
  r.end(C);
  r.p.release_graph_pool(g);
  says([&] { r.p.begin_capture(C, g); }, "does not exist");
}

INSTANTIATE_TEST_SUITE_P(Upstreams, GraphPool, ::testing::Bool(),
                         [](const auto& i) { return i.param ? std::string("virtual") : std::string("plain"); });

}  // namespace
