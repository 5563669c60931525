// Stream safety on the simulated device. Memory freed on stream A is reusable on A at once; on any
// other stream only after an event recorded on A after the free has completed — the spy ordering
// (tests/support) knows what the pool could legitimately know, and the model rejects any handout
// or unmap that runs ahead of it. Each test also states the expected addresses directly.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "support/model_check.hpp"
#include "support/pool_model.hpp"

namespace {

using namespace gpumem;
using gpumem::test::expect_model_holds;
using gpumem::test::sim_pool_rig;
using gpumem::test::KiB;
using gpumem::test::MiB;


bool overlaps(const void* a, std::size_t an, const void* b, std::size_t bn) {
  auto x = reinterpret_cast<std::uintptr_t>(a), y = reinterpret_cast<std::uintptr_t>(b);
  return x < y + bn && y < x + an;
}

struct cfg {
  const char* name;
  bool virtual_memory;
  std::size_t small_max;
  std::size_t bytes;  // request size used by the test: small (slab) or large (arena)
};

class StreamSafety : public ::testing::TestWithParam<cfg> {
 protected:
  std::unique_ptr<sim_pool_rig> rig(std::size_t capacity = std::size_t{1} << 30) {
    pool_options po;
    po.small_max_bytes = GetParam().small_max;
    return std::make_unique<sim_pool_rig>(
        sim_options{.capacity_bytes = capacity, .virtual_memory = GetParam().virtual_memory}, po);
  }
  std::size_t n() const { return GetParam().bytes; }
};

TEST_P(StreamSafety, FreedOnAIsReusedAtOnceOnA) {
  auto r = rig();
  const stream_ref A = r->dev->create_stream();
  void* p = r->allocate(n(), 256, A);
  r->deallocate(p, A);
  void* q = r->allocate(n(), 256, A);
  EXPECT_EQ(q, p) << "the same stream's freed block should be reused at once";
  expect_model_holds(*r);
}

TEST_P(StreamSafety, NotHandedToAnotherStreamBeforeTheEventCompletes) {
  auto r = rig();
  const stream_ref A = r->dev->create_stream(), B = r->dev->create_stream();
  std::vector<void*> freed;
  for (int i = 0; i < 8; ++i) freed.push_back(r->allocate(n(), 256, A));
  for (void* p : freed) r->deallocate(p, A);
  for (int i = 0; i < 8; ++i) {
    void* q = r->allocate(n(), 256, B);  // the model throws if q is unsafe for B
    for (void* p : freed) EXPECT_FALSE(overlaps(p, n(), q, n())) << "B got memory A may still use";
  }
  expect_model_holds(*r);
}

TEST_P(StreamSafety, UnderMemoryPressureThePoolWaitsInsteadOfHandingOutEarly) {
  // Capacity for a few requests only: B's request can be served only from A's freed memory, and
  // only after the pool has waited for A's event (synchronize) — never before.
  const std::size_t cap = std::max<std::size_t>(4 * MiB, align_up(n() * 2, 2 * MiB));
  auto r = rig(cap);
  const stream_ref A = r->dev->create_stream(), B = r->dev->create_stream();
  std::vector<void*> held;
  try {
    for (;;) held.push_back(r->allocate(n(), 256, A));
  } catch (const out_of_memory&) {
  }
  ASSERT_FALSE(held.empty());
  for (void* p : held) r->deallocate(p, A);
  r->model->check_full();
  const auto events_before = r->dev->events_recorded();
  void* q = nullptr;
  ASSERT_NO_THROW(q = r->allocate(n(), 256, B)) << "the pool should wait for A rather than fail";
  EXPECT_GT(r->dev->events_recorded(), events_before) << "reusing A's memory on B needs an event on A";
  EXPECT_EQ(r->dev->events_pending(), 0u) << "the pool handed A's memory to B: every event on A must be done";
  expect_model_holds(*r);
  r->deallocate(q, B);
  r->free_all_and_trim();
  EXPECT_EQ(r->dev->used_bytes(), 0u);
}

TEST_P(StreamSafety, AfterCompleteAnotherStreamMayReuse) {
  const std::size_t cap = std::max<std::size_t>(4 * MiB, align_up(n() * 2, 2 * MiB));
  auto r = rig(cap);
  const stream_ref A = r->dev->create_stream(), B = r->dev->create_stream();
  std::vector<void*> held;
  try {
    for (;;) held.push_back(r->allocate(n(), 256, A));
  } catch (const out_of_memory&) {
  }
  for (void* p : held) r->deallocate(p, A);
  // Make the pool record its event on A (a request from B it cannot serve without A's memory
  // would do that and wait; here we just let A finish everything it has and all that comes).
  r->dev->set_auto_complete(true);
  std::vector<void*> got;
  for (std::size_t i = 0; i < held.size(); ++i) got.push_back(r->allocate(n(), 256, B));
  EXPECT_EQ(got.size(), held.size()) << "after A completed, B can have all of A's memory";
  expect_model_holds(*r);
}

TEST_P(StreamSafety, RecordUseKeepsMemoryFromEveryOtherStreamUntilAllComplete) {
  auto r = rig();
  const stream_ref A = r->dev->create_stream(), B = r->dev->create_stream(), C = r->dev->create_stream();
  void* p = r->allocate(n(), 256, A);
  r->p->record_use(p, B);
  r->model->on_record_use(p, B);
  r->deallocate(p, A);
  for (stream_ref s : {A, C, A, C}) {
    void* q = r->allocate(n(), 256, s);
    EXPECT_FALSE(overlaps(p, n(), q, n())) << "reused on " << s.value() << " while B may still use it";
  }
  expect_model_holds(*r);
  // Once A and B completed and the pool learned so, it comes back (a slab slot to its slab, which
  // serves its owner A; an arena block to anyone).
  r->dev->set_auto_complete(true);
  r->p->trim();  // waits for everything pending
  bool reused = false;
  for (int i = 0; i < 64 && !reused; ++i) reused = overlaps(p, n(), r->allocate(n(), 256, A), n());
  EXPECT_TRUE(reused) << "after both streams completed, the memory should come back";
  expect_model_holds(*r);
}

TEST_P(StreamSafety, FreeOnAnotherStreamWaitsForThatStream) {
  // Allocated on A, last used on B and freed there: A must not get it back before B's event.
  auto r = rig();
  const stream_ref A = r->dev->create_stream(), B = r->dev->create_stream();
  void* p = r->allocate(n(), 256, A);
  r->deallocate(p, B);
  for (int i = 0; i < 4; ++i) EXPECT_FALSE(overlaps(p, n(), r->allocate(n(), 256, A), n()));
  expect_model_holds(*r);
}

TEST_P(StreamSafety, InterleavedStreamsWithPartialCompletion) {
  // Many rounds on 4 streams, completing one stream at a time: the model checks every handout.
  auto r = rig(64 * MiB);
  stream_ref s[4];
  for (auto& x : s) x = r->dev->create_stream();
  std::vector<std::pair<void*, stream_ref>> held;
  gpumem::test::rng g(42);
  for (int step = 0; step < 4000; ++step) {
    const stream_ref st = s[g.below(4)];
    if (held.size() < 24 && g.chance(55)) {
      try {
        held.push_back({r->allocate(n() + g.below(n()), 256, st), st});
      } catch (const out_of_memory&) {
      }
    } else if (!held.empty()) {
      auto i = g.below(held.size());
      r->deallocate(held[i].first, s[g.below(4)]);
      held.erase(held.begin() + static_cast<std::ptrdiff_t>(i));
    }
    if (g.chance(3)) r->dev->complete(s[g.below(4)]);
    if (step % 64 == 0) expect_model_holds(*r);
  }
  r->free_all_and_trim();
  EXPECT_EQ(r->dev->used_bytes(), 0u);
}

// The front cache moves slots between its bins and its stream's slabs in batches (refill on a
// miss, trim when a bin overflows). One thread on two streams, sizes across many small classes,
// frees on the allocating stream and on the other one: every handout must be safe for its stream
// (the model checks), and nothing may be lost or held twice (the invariants).
TEST(FrontCacheBatches, NeverHandAStreamsSlotsToAnotherStream) {
  for (const bool virtual_memory : {true, false}) {
    sim_pool_rig r(sim_options{.capacity_bytes = std::size_t{1} << 30, .virtual_memory = virtual_memory},
                   pool_options{});
    const stream_ref A = r.dev->create_stream(), B = r.dev->create_stream();
    std::vector<std::pair<void*, stream_ref>> held;
    std::uint64_t x = 12345;
    auto next = [&] {
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
      return x;
    };
    for (int step = 0; step < 20000; ++step) {
      const std::uint64_t v = next();
      if (held.size() < 300 && (v % 100 < 55 || held.empty())) {
        const stream_ref s = (v >> 8) % 2 ? A : B;
        const std::size_t bytes = std::size_t{256} << ((v >> 16) % 11);  // 256 B .. 256 KiB
        held.emplace_back(r.allocate(bytes - (v >> 32) % 200, 256, s), s);
      } else {
        const std::size_t k = (v >> 8) % held.size();
        // One free in five on the other stream: it lands in that stream's bins.
        const stream_ref on = (v >> 40) % 5 == 0 ? (held[k].second == A ? B : A) : held[k].second;
        r.deallocate(held[k].first, on);
        held[k] = held.back();
        held.pop_back();
      }
      if (step % 2000 == 0) {
        r.p->check_invariants();
        r.dev->complete(A);
      }
    }
    r.p->check_invariants();
    r.model->check_full();
    for (auto& [p, s] : held) r.deallocate(p, s);
    r.free_all_and_trim();
    EXPECT_EQ(r.dev->used_bytes(), 0u);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Pool, StreamSafety,
    ::testing::Values(cfg{"VirtualLarge", true, 64 << 10, 3 * MiB}, cfg{"VirtualSlab", true, 64 << 10, 1024},
                      cfg{"VirtualNoSlab", true, 0, 1024}, cfg{"SegmentsLarge", false, 64 << 10, 3 * MiB},
                      cfg{"SegmentsSlab", false, 64 << 10, 1024}, cfg{"SegmentsNoSlab", false, 0, 1024}),
    [](const auto& info) { return std::string(info.param.name); });

}  // namespace
