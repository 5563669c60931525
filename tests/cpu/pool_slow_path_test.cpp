// The slow path's driver traffic on a virtual upstream (issues 6 and 10): on a GPU every granule
// mapped or unmapped costs tens of microseconds, so the pool must stop remapping once a program
// repeats itself, must never grow while idle granules could be remapped instead (unless asked to,
// with idle_budget), and must still give everything back on trim and under memory pressure.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <vector>

#include "support/pool_model.hpp"
#include "support/moving_policy.hpp"

namespace {

using namespace gpumem;
using gpumem::test::rng;
using gpumem::test::sim_pool_rig;
using gpumem::test::KiB;
using gpumem::test::MiB;

constexpr std::size_t G = default_granularity;

std::uint64_t remapped(const pool_stats& s) { return s.maps + s.unmaps; }

// One step of a training-like loop: per layer an activation kept to the end of the step and a
// temporary freed at once, then everything freed in reverse order.
void training_step(sim_pool_rig& r, stream_ref s) {
  static const std::size_t sizes[] = {3 * MiB + 1000, 17 * MiB, 40 * MiB, 1000,       6 * MiB,
                                      64 * KiB,       12 * MiB + 7, 2 * MiB, 33 * MiB, 500 * KiB};
  std::vector<void*> kept;
  for (int layer = 0; layer < 6; ++layer)
    for (std::size_t a : sizes) {
      kept.push_back(r.allocate(a * (1 + layer % 3), default_alignment, s));
      r.deallocate(r.allocate(a / 2 + 256, default_alignment, s), s);
    }
  while (!kept.empty()) {
    r.deallocate(kept.back(), s);
    kept.pop_back();
  }
}

TEST(SlowPath, ARepeatingLoopStopsRemappingAfterWarmUp) {
  // Placement by address layout alone repeats when the program does: after the first steps every
  // request lands on granules the last step left mapped. (Front caches are off here: which blocks
  // they happen to hold when the arena places a request varies from step to step.)
  detail::pool_config po;
  gpumem::test::use_moving_policy(po);
  po.front_cache = false;
  sim_pool_rig r(sim_options{.capacity_bytes = std::size_t{64} << 30, .auto_complete = true}, po);
  const stream_ref s = r.dev->create_stream();
  for (int step = 0; step < 3; ++step) training_step(r, s);
  const pool_stats warm = r.p->stats();
  for (int step = 0; step < 10; ++step) {
    training_step(r, s);
    r.model->check_stats();
  }
  r.model->check_full();
  const pool_stats st = r.p->stats();
  EXPECT_EQ(st.maps, warm.maps) << "granules mapped after warm-up";
  EXPECT_EQ(st.unmaps, warm.unmaps) << "granules unmapped after warm-up";
  EXPECT_EQ(st.upstream_calls, warm.upstream_calls) << "granules created after warm-up";
  EXPECT_EQ(st.peak_reserved_bytes, warm.peak_reserved_bytes);
  EXPECT_LT(st.fragmentation(), 1.02);
  r.free_all_and_trim();
}

// Frees a random live block and allocates a new one of log-uniform size in [256 B, 64 MiB].
struct churn {
  sim_pool_rig& r;
  rng g{42};
  std::vector<void*> live;
  std::size_t live_bytes = 0, peak_live = 0;
  std::vector<std::size_t> bytes;
  explicit churn(sim_pool_rig& rig, std::size_t n) : r(rig) {
    for (std::size_t i = 0; i < n; ++i) add();
  }
  void add() {
    const std::size_t b = gpumem::test::log_uniform(g.next(), g.next(), 256, 64 * MiB);
    live.push_back(r.allocate(b, default_alignment, stream_ref{}));
    bytes.push_back(b);
    live_bytes += b;
    peak_live = std::max(peak_live, live_bytes);
  }
  void steps(std::size_t n) {
    for (std::size_t i = 0; i < n; ++i) {
      const std::size_t k = g.below(live.size());
      r.deallocate(live[k], stream_ref{});
      live_bytes -= bytes[k];
      live[k] = live.back();
      bytes[k] = bytes.back();
      live.pop_back();
      bytes.pop_back();
      add();
    }
  }
};

TEST(SlowPath, ChurnWithAnIdleBudgetAlmostNeverRemaps) {
  // Random sizes never repeat: with no spare memory every miss remaps. An idle budget lets the
  // pool keep enough mapped that, after warm-up, requests land on mapped memory.
  detail::pool_config po;
  gpumem::test::use_moving_policy(po);
  po.idle_budget = 0.25;
  sim_pool_rig r(sim_options{.capacity_bytes = std::size_t{1} << 40, .auto_complete = true}, po);
  churn c(r, 300);
  c.steps(20000);
  const pool_stats warm = r.p->stats();
  c.steps(20000);
  r.model->check_full();
  const pool_stats st = r.p->stats();
  const double per_1000_ops = 1000.0 * double(remapped(st) - remapped(warm)) / 40000.0;
  EXPECT_LT(per_1000_ops, 2.0) << "granules mapped or unmapped per 1000 ops after warm-up";
  EXPECT_LT(double(st.peak_reserved_bytes) / double(c.peak_live), 1.3);
  r.free_all_and_trim();
}

TEST(SlowPath, ChurnWithoutBudgetStaysTightAndCountsItsCalls) {
  sim_pool_rig r(sim_options{.capacity_bytes = std::size_t{1} << 40, .auto_complete = true}, detail::pool_config{});
  churn c(r, 300);
  c.steps(20000);
  r.model->check_full();
  const pool_stats st = r.p->stats();
  EXPECT_LT(double(st.peak_reserved_bytes) / double(c.peak_live), 1.08);
  // Calls cover contiguous runs: never more calls than granules, and some run was longer than one.
  EXPECT_GT(st.map_calls, 0u);
  EXPECT_LE(st.map_calls, st.maps);
  EXPECT_LE(st.unmap_calls, st.unmaps);
  EXPECT_LT(st.map_calls, st.maps);
  r.free_all_and_trim();
}

// What blocks() says about granules: mapped ones, and those a live or stream-owned block touches.
struct granule_view {
  std::set<std::uintptr_t> mapped, busy;
  explicit granule_view(const pool& p) {
    for (const auto& b : p.blocks()) {
      if (b.st == block_info::state::unmapped) continue;
      // Cached blocks with a stream are owned by it (freed, the stream's work maybe pending):
      // their granules stay mapped. Ready ones (stream 0 here: the test uses other streams) not.
      const bool is_busy = b.st == block_info::state::live || b.stream != stream_ref{};
      for (std::uintptr_t g = b.address / G * G; g < b.address + b.bytes; g += G) {
        mapped.insert(g);
        if (is_busy) busy.insert(g);
      }
    }
  }
};

TEST(SlowPath, ReservedGrowsOnlyWhenNoSpareOrIdleGranuleIsLeft) {
  // The property behind "peak reserved is what harvesting at every free would need": before
  // growing, the pool takes spare granules, then idle ones (mapped, touched by no live or owned
  // block), and only the rest from the upstream. Checked at every allocation of a random sequence
  // of arena-sized requests on three streams.
  detail::pool_config po;
  gpumem::test::use_moving_policy(po);
  po.front_cache = false;
  sim_pool_rig r(sim_options{.capacity_bytes = std::size_t{1} << 40, .auto_complete = true}, po);
  const stream_ref streams[] = {r.dev->create_stream(), r.dev->create_stream(), r.dev->create_stream()};
  rng g(7);
  struct held { void* p; stream_ref s; };
  std::vector<held> live;
  std::uint64_t grew = 0;
  for (int step = 0; step < 3000; ++step) {
    if (live.size() > 40 || (!live.empty() && g.chance(45))) {
      const std::size_t k = g.below(live.size());
      r.deallocate(live[k].p, g.chance(80) ? live[k].s : streams[g.below(3)]);
      live[k] = live.back();
      live.pop_back();
      continue;
    }
    const std::size_t bytes = gpumem::test::log_uniform(g.next(), g.next(), 2 * MiB, 48 * MiB);
    const stream_ref s = streams[g.below(3)];
    const granule_view before(*r.p);
    const std::size_t reserved_before = r.p->stats().reserved_bytes / G;
    ASSERT_GE(reserved_before, before.mapped.size());
    const std::size_t spares = reserved_before - before.mapped.size();
    void* p = r.allocate(bytes, default_alignment, s);
    live.push_back({p, s});
    const std::size_t reserved_after = r.p->stats().reserved_bytes / G;
    const auto a = reinterpret_cast<std::uintptr_t>(p);
    const std::uintptr_t lo = a / G * G, hi = (a + align_up(bytes, 256) + G - 1) / G * G;
    std::size_t needed = 0, idle_outside = 0;
    for (std::uintptr_t x = lo; x < hi; x += G) needed += !before.mapped.count(x);
    for (std::uintptr_t x : before.mapped)
      idle_outside += !before.busy.count(x) && (x < lo || x >= hi);
    const std::size_t available = spares + idle_outside;
    const std::size_t allowed = needed > available ? needed - available : 0;
    ASSERT_LE(reserved_after, reserved_before + allowed)
        << "step " << step << ": grew by " << reserved_after - reserved_before << " granules needing " << needed
        << " with " << spares << " spare and " << idle_outside << " idle granules";
    grew += reserved_after > reserved_before;
    if (step % 250 == 0) r.model->check_full();
  }
  EXPECT_GT(grew, 0u);
  r.model->check_full();
  for (auto& h : live) r.deallocate(h.p, h.s);
  r.free_all_and_trim();
}

TEST(SlowPath, LazyHarvestingPeaksNoHigherThanHarvestingAtEveryFree) {
  // The same planted program twice: lazily (idle granules stay mapped until needed elsewhere) and
  // eagerly (release_threshold_bytes = 0: every idle granule is unmapped and released at once).
  // The lazy pool reaches no higher peak and makes far fewer driver calls.
  auto run = [](std::size_t threshold) {
    detail::pool_config po;
    gpumem::test::use_moving_policy(po);
    po.release_threshold_bytes = threshold;
    sim_pool_rig r(sim_options{.capacity_bytes = std::size_t{64} << 30, .auto_complete = true}, po);
    for (int round = 0; round < 4; ++round) {
      std::vector<void*> a, b;
      for (int i = 0; i < 20; ++i) a.push_back(r.allocate(6 * MiB + 4096, default_alignment, stream_ref{}));
      for (int i = 0; i < 20; i += 2) r.deallocate(a[i], stream_ref{});                  // holes of 6 MiB
      for (int i = 0; i < 6; ++i) b.push_back(r.allocate(13 * MiB, default_alignment, stream_ref{}));  // fit none
      for (int i = 1; i < 20; i += 2) r.deallocate(a[i], stream_ref{});
      for (void* p : b) r.deallocate(p, stream_ref{});
      for (int i = 0; i < 3; ++i) b.push_back(r.allocate(40 * MiB, default_alignment, stream_ref{}));
      for (std::size_t i = 6; i < b.size(); ++i) r.deallocate(b[i], stream_ref{});
    }
    r.model->check_full();
    const pool_stats st = r.p->stats();
    r.free_all_and_trim();
    return st;
  };
  const pool_stats lazy = run(SIZE_MAX), eager = run(0);
  EXPECT_LE(lazy.peak_reserved_bytes, eager.peak_reserved_bytes);
  EXPECT_LT(remapped(lazy) + lazy.upstream_calls + lazy.upstream_releases,
            (remapped(eager) + eager.upstream_calls + eager.upstream_releases) / 4)
      << "lazy: " << remapped(lazy) << " granules remapped; eager: " << remapped(eager);
}

TEST(SlowPath, TrimGivesEverythingBackWithAnIdleBudget) {
  detail::pool_config po;
  gpumem::test::use_moving_policy(po);
  po.idle_budget = 1.0;
  sim_pool_rig r(sim_options{.capacity_bytes = std::size_t{1} << 40, .auto_complete = true}, po);
  churn c(r, 100);
  c.steps(3000);
  for (void* p : c.live) r.deallocate(p, stream_ref{});
  c.live.clear();
  EXPECT_GT(r.p->stats().reserved_bytes, 0u);
  r.p->trim();
  EXPECT_EQ(r.p->stats().reserved_bytes, 0u);
  EXPECT_EQ(r.dev->used_bytes(), 0u);
  r.model->check_full();
}

TEST(SlowPath, AnIdleBudgetGivesWayWhenTheDeviceIsFull) {
  // 20 granules of device. A (15 granules) freed stays mapped and idle: the budget (10x live)
  // would keep it. B needs 18 granules elsewhere (C bounds A's hole); only 3 can be created, so
  // the pool must remap A's idle granules after all instead of failing.
  detail::pool_config po;
  gpumem::test::use_moving_policy(po);
  po.idle_budget = 10.0;
  sim_pool_rig r(sim_options{.capacity_bytes = 40 * MiB}, po);
  void* a = r.allocate(30 * MiB, default_alignment, stream_ref{});
  void* c = r.allocate(4 * MiB, default_alignment, stream_ref{});
  r.deallocate(a, stream_ref{});
  r.dev->complete_all();
  void* b = nullptr;
  ASSERT_NO_THROW(b = r.allocate(36 * MiB, default_alignment, stream_ref{}));
  EXPECT_LE(r.p->stats().reserved_bytes, 40 * MiB);
  r.model->check_full();
  r.deallocate(b, stream_ref{});
  r.deallocate(c, stream_ref{});
  r.free_all_and_trim();
}

// P (200 MiB) live above A (10 MiB), which is freed and idle; then B (12 MiB) lands above P.
// The idle budget (10% of live) keeps A's 5 granules mapped and grows B's 6; with a reserve
// ceiling of 1.03 the pool moves A's granules instead, since growing would take reserved past
// 1.03x peak live.
std::size_t reserved_after_idle_scene(double ceiling) {
  detail::pool_config po;
  gpumem::test::use_moving_policy(po);
  po.idle_budget = 0.1;
  po.reserve_ceiling = ceiling;
  const pool_stats st = gpumem::test::stats_after_idle_hole(
      sim_options{.capacity_bytes = std::size_t{1} << 30, .auto_complete = true}, po, 10 * MiB, 200 * MiB, 12 * MiB);
  EXPECT_EQ(st.peak_live_bytes, 212 * MiB);
  return st.peak_reserved_bytes;
}

TEST(SlowPath, TheIdleBudgetGrowsBesideIdleMemory) { EXPECT_EQ(reserved_after_idle_scene(0), 222 * MiB); }

TEST(SlowPath, AReserveCeilingMovesIdleMemoryTheIdleBudgetWouldKeep) {
  const std::size_t reserved = reserved_after_idle_scene(1.03);
  EXPECT_LE(double(reserved), 1.03 * 212 * MiB);
  EXPECT_EQ(reserved, 212 * MiB) << "A's 5 granules moved under B, 1 grown";
}

TEST(SlowPath, AReserveCeilingBelowOneIsRefused) {
  sim_device dev;
  detail::pool_config po;
  gpumem::test::use_moving_policy(po);
  for (double bad : {0.5, -1.0, std::nan("")}) {
    po.reserve_ceiling = bad;
    EXPECT_THROW(pool(dev.memory(), dev.streams(), po, po), std::invalid_argument) << bad;
  }
  po.reserve_ceiling = 1.0;
  EXPECT_NO_THROW(pool(dev.memory(), dev.streams(), po, po));
}

TEST(SlowPath, NegativeIdleBudgetIsRefused) {
  sim_device dev;
  detail::pool_config po;
  gpumem::test::use_moving_policy(po);
  po.idle_budget = -0.5;
  EXPECT_THROW(pool(dev.memory(), dev.streams(), po, po), std::invalid_argument);
  po.idle_budget = std::nan("");
  EXPECT_THROW(pool(dev.memory(), dev.streams(), po, po), std::invalid_argument);
}

TEST(SimUpstream, UnmapCoversWholeMappingsLaidEndToEnd) {
  // As cuMemUnmap: one call may unmap several adjacent mappings, each whole; never part of one.
  sim_device dev;
  upstream& up = dev.memory();
  auto* base = static_cast<std::byte*>(up.reserve_range(16 * G));
  std::vector<physical_handle> h;
  for (int i = 0; i < 4; ++i) h.push_back(*up.create_physical(G));
  up.map_run(base, G, h.data(), 3);  // three mappings, one call
  EXPECT_TRUE(dev.is_mapped(base, 3 * G));
  gpumem::test::misuse_recorder rec;
  up.unmap(base, G + G / 2);  // part of the second mapping: refused, nothing unmapped
  up.unmap(base + G, 3 * G);  // runs past the last mapping: refused
  EXPECT_EQ(rec.take().size(), 2u);
  EXPECT_TRUE(dev.is_mapped(base, 3 * G));
  up.unmap(base, 3 * G);
  EXPECT_FALSE(dev.is_mapped(base, G));
  EXPECT_EQ(rec.count(), 0u);
  // map_run is all or none: a bad handle in the middle leaves nothing mapped.
  std::vector<physical_handle> bad{h[0], physical_handle{987654}, h[1]};
  EXPECT_THROW(up.map_run(base, G, bad.data(), 3), std::invalid_argument);
  EXPECT_FALSE(dev.is_mapped(base, G));
  for (auto x : h) up.release_physical(x, G);
  up.release_range(base, 16 * G);
  EXPECT_EQ(dev.used_bytes(), 0u);
}

}  // namespace
