// gpumem doctor: one planted trace per pitfall, each found with the figures it was built to have;
// a clean trace gives nothing above info. Traces are built in memory, except the one a
// trace_adaptor writes to a file as it would around pinned_host_resource.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <new>
#include <string>

#include "gpumem/detail/pool_tuning.hpp"
#include "gpumem/doctor.hpp"
#include "gpumem/errors.hpp"
#include "gpumem/host_memory.hpp"
#include "gpumem/trace_adaptor.hpp"
#include "support/temp_path.hpp"

using gpumem::doctor_options;
using gpumem::severity;
using gpumem::trace_action;

namespace {

constexpr std::uint64_t MiB = std::uint64_t{1} << 20;
constexpr std::uint64_t GiB = std::uint64_t{1} << 30;

// Builds a trace row by row; every row advances the clock by `step_us`.
class trace_builder {
 public:
  explicit trace_builder(std::int64_t step_us = 10, std::string name = "planted") : step_us_(step_us) {
    t_.name = std::move(name);
  }

  std::uint64_t alloc(std::uint64_t size, std::uint64_t stream = 0) {
    const std::uint64_t p = next_ += 0x100000;
    row(trace_action::allocate, p, size, stream);
    return p;
  }
  void free(std::uint64_t p, std::uint64_t size, std::uint64_t stream = 0) {
    row(trace_action::free, p, size, stream);
  }
  void fail(std::uint64_t size) { row(trace_action::allocate_failure, 0, size, 0); }
  void wait(std::int64_t us) { now_ += us; }
  void untimed() { timed_ = false; }
  const gpumem::trace& get() const { return t_; }

 private:
  void row(trace_action a, std::uint64_t p, std::uint64_t size, std::uint64_t stream) {
    now_ += step_us_;
    t_.records.push_back({0, timed_ ? now_ : -1, a, p, size, stream});
    t_.lines.push_back(t_.lines.size() + 2);  // line 1 is the header
  }
  gpumem::trace t_;
  std::int64_t now_ = 1000000;
  std::int64_t step_us_;
  std::uint64_t next_ = 0x7f0000000000;
  bool timed_ = true;
};

// A healthy training-like loop: one stream, MiB-sized aligned buffers, everything freed, a
// footprint that never strays far from its mean.
trace_builder clean_trace() {
  trace_builder b;
  const std::uint64_t base = b.alloc(16 * MiB);
  for (int i = 0; i < 200; ++i) {
    const std::uint64_t a = b.alloc(4 * MiB);
    const std::uint64_t c = b.alloc(2 * MiB);
    b.free(a, 4 * MiB);
    b.free(c, 2 * MiB);
  }
  b.free(base, 16 * MiB);
  return b;
}

// By value: callers often pass a temporary report.
gpumem::finding must_find(const gpumem::doctor_report& r, const std::string& id) {
  const gpumem::finding* f = r.find(id);
  if (!f) throw std::runtime_error("finding `" + id + "` missing");
  return *f;
}

// A replay engine that reports the peak reserve a test wants (for the clean trace: 22 MiB live),
// with no granule moved, and remembers what it was asked.
struct fake_replayer {
  std::size_t reserved_bytes;
  std::vector<std::string>* asked;
  gpumem::replay_result operator()(const gpumem::trace&, const gpumem::replay_options& o) const {
    asked->push_back(o.resource);
    gpumem::replay_result r;
    r.resource = o.resource;
    r.peak_live_bytes = 22 * MiB;
    r.peak_reserved_bytes = reserved_bytes;
    r.fragmentation = double(reserved_bytes) / double(22 * MiB);
    r.stats.maps = r.stats.driver_maps = reserved_bytes / (2 * MiB);  // growth only
    return r;
  }
};

}  // namespace

TEST(Doctor, CleanTraceHasNothingAboveInfo) {
  std::vector<std::string> asked;
  doctor_options opts;
  opts.replayer = fake_replayer{24 * MiB, &asked};
  const auto r = gpumem::diagnose(clean_trace().get(), opts);
  EXPECT_EQ(r.worst(), severity::info);
  for (const auto& f : r.findings) { EXPECT_EQ(f.level, severity::info) << f.id << ": " << f.summary; }
  for (const char* id : {"small-object-churn", "cross-stream-free", "unaligned-sizes", "leak", "alloc-failure"})
    EXPECT_EQ(r.find(id), nullptr) << id;
  EXPECT_NE(r.find("peak-to-average"), nullptr);
  EXPECT_NE(r.find("hot-allocation-sizes"), nullptr);
  EXPECT_NE(r.find("fragmentation"), nullptr);
  EXPECT_EQ(r.find("slow-path-remapping"), nullptr);  // growth only: nothing moved
  EXPECT_EQ(r.skipped, std::vector<std::string>{"pinned-memory: no pinned trace given (--pinned)"});
  EXPECT_EQ(r.rows, 802u);
  EXPECT_EQ(r.allocations, 401u);
  EXPECT_EQ(r.frees, 401u);
  EXPECT_EQ(r.peak_live_bytes, 22 * MiB);
}

TEST(Doctor, SmallObjectChurn) {
  trace_builder b(2);  // a row every 2 us: 250,000 rows per second
  const std::uint64_t big = b.alloc(8 * MiB);
  for (int i = 0; i < 300; ++i) {
    const std::uint64_t p = b.alloc(64);
    b.free(p, 64);
  }
  b.free(big, 8 * MiB);
  const auto r = gpumem::diagnose(b.get());
  const auto& f = must_find(r, "small-object-churn");
  // 300 pairs at 0.5 us each in 601 x 2 us of job time: 12.5%, an error.
  EXPECT_DOUBLE_EQ(f.cost_seconds, 300 * 0.5e-6);
  EXPECT_NEAR(f.cost_share, 300 * 0.5 / (601 * 2.0), 1e-12);
  EXPECT_EQ(f.level, severity::error);
  EXPECT_EQ(f.at("small_allocations"), 300);
  EXPECT_DOUBLE_EQ(f.at("small_allocation_share"), 300.0 / 301.0);
  EXPECT_DOUBLE_EQ(f.at("small_allocations_per_1000_ops"), 300.0 * 1000 / 602);
  // 602 rows, 601 gaps of 2 us between the first and last.
  EXPECT_DOUBLE_EQ(f.at("small_allocations_per_second"), 300.0 / (601 * 2e-6));
  EXPECT_EQ(f.at("small_threshold_bytes"), 4096);
}

// A trace of a few µs is judged as if it lasted min_job_seconds: two small allocations in 3 µs
// are not a third of a job.
TEST(Doctor, AShortTraceIsNotAlarmedByMicroseconds) {
  trace_builder b(1);
  for (int i = 0; i < 2; ++i) b.free(b.alloc(64), 64);
  const auto r = gpumem::diagnose(b.get());
  EXPECT_DOUBLE_EQ(r.job_seconds, 0.001);
  EXPECT_EQ(must_find(r, "small-object-churn").level, severity::info);
}

TEST(Doctor, SmallObjectsAtALeisurelyRateAreInfo) {
  trace_builder b(1000);  // a row every millisecond: 250 small allocations per second
  for (int i = 0; i < 100; ++i) {
    const std::uint64_t p = b.alloc(64);
    b.free(p, 64);
  }
  const auto& f = must_find(gpumem::diagnose(b.get()), "small-object-churn");
  EXPECT_EQ(f.level, severity::info);
  EXPECT_DOUBLE_EQ(f.at("small_allocation_share"), 1.0);
}

// A trace without times stands for untimed_us_per_row per row: 100 pairs (50 us) in 200 rows (2 ms).
TEST(Doctor, SmallObjectChurnWithoutTimesCountsRows) {
  trace_builder b;
  b.untimed();
  for (int i = 0; i < 100; ++i) {
    const std::uint64_t p = b.alloc(100);
    b.free(p, 100);
  }
  const auto r = gpumem::diagnose(b.get());
  const auto& f = must_find(r, "small-object-churn");
  EXPECT_TRUE(r.job_seconds_estimated);
  EXPECT_DOUBLE_EQ(r.job_seconds, 200 * 10e-6);
  EXPECT_NEAR(f.cost_share, 0.025, 1e-12);
  EXPECT_EQ(f.level, severity::warning);
  EXPECT_THROW((void)f.at("small_allocations_per_second"), std::out_of_range);
  EXPECT_EQ(r.duration_seconds, 0.0);
  // And the mean live is per row, said so by the figure's name.
  EXPECT_NO_THROW((void)must_find(r, "peak-to-average").at("op_weighted_mean_live_bytes"));
}

TEST(Doctor, CrossStreamFree) {
  trace_builder b;
  for (int i = 0; i < 100; ++i) {
    const std::uint64_t p = b.alloc(MiB, 0x11);
    b.free(p, MiB, i < 10 ? 0x22 : 0x11);  // ten freed on another stream
  }
  const auto& f = must_find(gpumem::diagnose(b.get()), "cross-stream-free");
  // Peak live is the first block, freed on the other stream: 1 MiB of an 80 GiB device.
  EXPECT_EQ(f.at("cross_stream_bytes_at_peak"), MiB);
  EXPECT_EQ(f.cost_bytes, MiB);
  EXPECT_EQ(f.level, severity::info);
  EXPECT_EQ(f.at("cross_stream_frees"), 10);
  EXPECT_EQ(f.at("cross_stream_bytes"), 10 * MiB);
  EXPECT_DOUBLE_EQ(f.at("cross_stream_free_share"), 0.1);
}

// What a cross-stream free costs is what it holds at the peak: 96 of 100 MiB live there, on a
// 1 GiB device, is 9.4% of it: a warning; on a 512 MiB one, 18.75%: an error.
TEST(Doctor, CrossStreamFreeAtThePeakCostsItsBytes) {
  trace_builder b;
  const std::uint64_t keep = b.alloc(4 * MiB, 1);
  const std::uint64_t big = b.alloc(96 * MiB, 1);
  b.free(big, 96 * MiB, 2);
  b.free(keep, 4 * MiB, 1);
  for (const auto& [device, level] : {std::pair{GiB, severity::warning}, std::pair{GiB / 2, severity::error}}) {
    doctor_options opts;
    opts.replay.capacity_bytes = device;
    const auto r = gpumem::diagnose(b.get(), opts);
    const auto& f = must_find(r, "cross-stream-free");
    EXPECT_EQ(f.at("cross_stream_bytes_at_peak"), 96 * MiB);
    EXPECT_DOUBLE_EQ(f.cost_share, 96.0 * MiB / double(device));
    EXPECT_EQ(f.level, level);
    EXPECT_EQ(r.findings.front().id, "cross-stream-free");  // the costliest, listed first
  }
}

TEST(Doctor, UnalignedSizes) {
  trace_builder b;
  std::vector<std::uint64_t> ps;
  for (int i = 0; i < 100; ++i) ps.push_back(b.alloc(1000));  // rounds to 1024: 24 B each
  for (auto p : ps) b.free(p, 1000);
  const auto& f = must_find(gpumem::diagnose(b.get()), "unaligned-sizes");
  EXPECT_EQ(f.cost_bytes, 2400);  // a few KiB of a device: nothing to act on
  EXPECT_EQ(f.level, severity::info);
  EXPECT_EQ(f.at("unaligned_allocations"), 100);
  EXPECT_DOUBLE_EQ(f.at("unaligned_share"), 1.0);
  EXPECT_EQ(f.at("rounding_bytes_total"), 2400);
  EXPECT_EQ(f.at("rounding_bytes_at_peak"), 2400);
  EXPECT_DOUBLE_EQ(f.at("rounding_share_of_peak_live"), 2400.0 / 100000.0);
}

TEST(Doctor, LeakAccumulatingThroughTheJob) {
  trace_builder b;
  for (int i = 0; i < 100; ++i) {
    const std::uint64_t p = b.alloc(2 * MiB);
    if (i % 10 == 0)
      (void)b.alloc(i == 50 ? 3 * MiB : MiB);  // never freed: 10 leaks, one bigger
    b.free(p, 2 * MiB);
  }
  doctor_options opts;
  opts.replay.capacity_bytes = 256 * MiB;  // 12 MiB leaked of it: 4.7%
  const auto r = gpumem::diagnose(b.get(), opts);
  const auto& f = must_find(r, "leak");
  EXPECT_EQ(f.cost_bytes, 12 * MiB);
  EXPECT_EQ(f.level, severity::warning);
  EXPECT_EQ(f.at("leaked_allocations"), 10);
  EXPECT_EQ(f.at("leaked_bytes"), 12 * MiB);
  EXPECT_EQ(f.at("largest_leak_bytes"), 3 * MiB);
  EXPECT_EQ(f.at("first_leak_line"), 3);    // header, the first 2 MiB alloc, then the leak
  EXPECT_EQ(f.at("last_leak_line"), 3 + 9 * 21);  // each tenth iteration is 21 rows on
  EXPECT_DOUBLE_EQ(f.at("leaked_share_of_peak_live"), 12.0 * MiB / static_cast<double>(r.peak_live_bytes));
}

TEST(Doctor, BuffersKeptFromTheStartAreAnInfoLeak) {
  trace_builder b;
  (void)b.alloc(64 * MiB);  // set up once, outlives the trace
  for (int i = 0; i < 100; ++i) {
    const std::uint64_t p = b.alloc(MiB);
    b.free(p, MiB);
  }
  doctor_options opts;
  opts.replay.capacity_bytes = 256 * MiB;  // a quarter of it, but a buffer set up once costs nothing
  const auto& f = must_find(gpumem::diagnose(b.get(), opts), "leak");
  EXPECT_EQ(f.cost_bytes, 0);
  EXPECT_EQ(f.level, severity::info);
  EXPECT_EQ(f.at("leaked_allocations"), 1);
  EXPECT_EQ(f.at("leaked_bytes"), 64 * MiB);
}

TEST(Doctor, AllocFailure) {
  trace_builder b;
  const std::uint64_t p = b.alloc(MiB);
  b.fail(40 * MiB);
  b.fail(80 * MiB);
  b.fail(10 * MiB);
  b.free(p, MiB);
  const auto r = gpumem::diagnose(b.get());
  const auto& f = must_find(r, "alloc-failure");
  EXPECT_EQ(f.cost_share, 1.0);
  EXPECT_EQ(f.level, severity::error);
  EXPECT_EQ(r.findings.front().id, "alloc-failure");
  EXPECT_EQ(f.at("failed_requests"), 3);
  EXPECT_EQ(f.at("largest_failed_request_bytes"), 80 * MiB);
  EXPECT_EQ(f.at("first_failure_line"), 3);
  EXPECT_EQ(r.allocate_failures, 3u);
  EXPECT_EQ(r.worst(), severity::error);
  EXPECT_EQ(r.find("leak"), nullptr);  // failed rows make nothing live
}

TEST(Doctor, PeakToAverage) {
  trace_builder b(10);
  const std::uint64_t base = b.alloc(MiB);        // t = 0
  b.wait(980);
  const std::uint64_t spike = b.alloc(99 * MiB);  // t = 990
  b.free(spike, 99 * MiB);                        // t = 1000
  b.wait(990);
  b.free(base, MiB);                              // t = 2000
  // Live: 1 MiB for 990 us, 100 MiB for 10 us, 1 MiB for 1000 us: mean = 2990 MiB.us / 2000 us.
  const auto& f = must_find(gpumem::diagnose(b.get()), "peak-to-average");
  EXPECT_EQ(f.level, severity::info);  // the job needs its peak: no cost to it
  EXPECT_DOUBLE_EQ(f.at("idle_share_of_peak"), 1.0 - 2990.0 / (100.0 * 2000.0));
  EXPECT_EQ(f.at("peak_live_bytes"), 100 * MiB);
  EXPECT_DOUBLE_EQ(f.at("time_weighted_mean_live_bytes"), 2990.0 * MiB / 2000.0);
  EXPECT_DOUBLE_EQ(f.at("peak_to_average"), 100.0 * 2000.0 / 2990.0);
  EXPECT_EQ(f.at("peak_line"), 3);
}

TEST(Doctor, HotAllocationSizes) {
  trace_builder b;
  auto churn = [&](std::uint64_t size, int n) {
    for (int i = 0; i < n; ++i) b.free(b.alloc(size), size);
  };
  churn(8192, 50);
  churn(MiB, 30);
  churn(4096, 30);  // ties with 1 MiB: the smaller size ranks first
  churn(3 * MiB, 10);
  const auto& f = must_find(gpumem::diagnose(b.get()), "hot-allocation-sizes");
  EXPECT_EQ(f.level, severity::info);
  EXPECT_EQ(f.at("top1_size_bytes"), 8192);
  EXPECT_EQ(f.at("top1_allocations"), 50);
  EXPECT_DOUBLE_EQ(f.at("top1_share"), 50.0 / 120.0);
  EXPECT_EQ(f.at("top2_size_bytes"), 4096);
  EXPECT_EQ(f.at("top3_size_bytes"), MiB);
  EXPECT_EQ(f.at("top4_size_bytes"), 3 * MiB);
  EXPECT_THROW((void)f.at("top5_size_bytes"), std::out_of_range);  // only four sizes
  EXPECT_DOUBLE_EQ(f.at("top_sizes_share"), 1.0);
}

// The bound: 22 MiB live at peak (aligned sizes) is 11 whole granules; only the reserve above it
// costs, as a share of the device: on 512 MiB, 8 MiB over is 1.6% (a warning), 58 MiB 11% (an error).
TEST(Doctor, FragmentationJudgedAgainstTheGranuleBound) {
  for (const auto& [reserved, level] : {std::pair{22 * MiB, severity::info}, std::pair{30 * MiB, severity::warning},
                                        std::pair{80 * MiB, severity::error}}) {
    std::vector<std::string> asked;
    doctor_options opts;
    opts.replay.capacity_bytes = 512 * MiB;
    opts.replayer = fake_replayer{reserved, &asked};
    const auto& f = must_find(gpumem::diagnose(clean_trace().get(), opts), "fragmentation");
    EXPECT_EQ(asked, (std::vector<std::string>{"pool"}));  // nothing moved: no remapping replays
    EXPECT_EQ(f.at("bound_bytes"), 22 * MiB);
    EXPECT_EQ(f.at("wasted_bytes"), reserved - 22 * MiB);
    EXPECT_NEAR(f.at("reserved_over_bound"), double(reserved) / double(22 * MiB), 1e-12);
    EXPECT_EQ(f.level, level) << reserved;
    EXPECT_NE(f.summary.find("rounded up to whole granules"), std::string::npos) << f.summary;
    // Advice names what the user can do, not what the pool already does.
    EXPECT_EQ(f.advice.find("remap"), std::string::npos) << f.advice;
  }
}

// Sizes not a multiple of the granule: the bound rounds the aligned peak up to whole granules.
TEST(Doctor, FragmentationBoundRoundsUpToWholeGranules) {
  trace_builder b;
  std::vector<std::uint64_t> ps;
  for (int i = 0; i < 9; ++i) ps.push_back(b.alloc(MiB + 100));  // 9 x (1 MiB + 256 B) aligned
  for (auto p : ps) b.free(p, MiB + 100);
  std::vector<std::string> asked;
  doctor_options opts;
  opts.replayer = fake_replayer{10 * MiB, &asked};
  const auto& f = must_find(gpumem::diagnose(b.get(), opts), "fragmentation");
  EXPECT_EQ(f.at("peak_aligned_live_bytes"), 9 * (MiB + 256));
  EXPECT_EQ(f.at("bound_bytes"), 10 * MiB);  // 5 granules
  EXPECT_EQ(f.at("wasted_bytes"), 0);
}

TEST(Doctor, FragmentationSkippedWithoutAReplayEngine) {
  const auto r = gpumem::diagnose(clean_trace().get());
  EXPECT_EQ(r.find("fragmentation"), nullptr);
  EXPECT_EQ(r.find("slow-path-remapping"), nullptr);
  ASSERT_EQ(r.skipped.size(), 3u);  // and pinned-memory: no pinned trace
  EXPECT_EQ(r.skipped[0], "fragmentation: no replay engine was given");
  EXPECT_EQ(r.skipped[1], "slow-path-remapping: no replay engine was given");
}

namespace {

gpumem::trace varlen_example() {
  return gpumem::read_trace(std::filesystem::path(GPUMEM_EXAMPLES) / "varlen_inference.csv");
}

doctor_options with_the_real_replay() {
  doctor_options opts;
  opts.replayer = [](const gpumem::trace& tr, const gpumem::replay_options& o) { return gpumem::replay(tr, o); };
  return opts;
}

}  // namespace

// The real engine on a bundled example: the pool cannot reserve less than the granule bound.
TEST(Doctor, FragmentationWithTheRealReplay) {
  const auto t = varlen_example();
  const doctor_options opts = with_the_real_replay();
  const auto r = gpumem::diagnose(t, opts);
  const auto& f = must_find(r, "fragmentation");
  EXPECT_GE(f.at("bound_bytes"), static_cast<double>(r.peak_live_bytes));
  EXPECT_GE(f.at("pool_peak_reserved_bytes"), f.at("bound_bytes"));
  EXPECT_GE(f.at("fragmentation"), 1.0);
  EXPECT_EQ(f.at("pool_failed_allocations"), 0);
}

// slow-path-remapping on the real engine: the default pool's moves (maps beyond the granules its
// peak reserve grew, and unmaps) with the driver calls among them priced at the H200's costs.
TEST(Doctor, SlowPathRemappingPricesTheDefaultPoolsMoves) {
  const auto t = varlen_example();
  const doctor_options opts = with_the_real_replay();
  const auto r = gpumem::diagnose(t, opts);
  const auto& f = must_find(r, "slow-path-remapping");
  gpumem::replay_options o;
  const gpumem::replay_result direct = gpumem::replay(t, o);
  const std::uint64_t grown = direct.peak_reserved_bytes / (2 * MiB);
  ASSERT_GT(direct.stats.unmaps, 0u);
  EXPECT_EQ(f.at("granules_moved"), double(std::max(direct.stats.maps - grown, direct.stats.unmaps)));
  EXPECT_EQ(f.at("driver_maps_of_moves"), double(direct.stats.driver_maps - grown));
  EXPECT_EQ(f.at("driver_unmaps_of_moves"), double(direct.stats.driver_unmaps));
  const auto& th = opts.thresholds;
  const double seconds = (double(direct.stats.driver_maps - grown) * th.map_us_per_granule +
                          double(direct.stats.driver_unmaps) * th.unmap_us_per_granule) * 1e-6;
  EXPECT_NEAR(f.at("estimated_h200_driver_seconds"), seconds, 1e-12);
  EXPECT_NEAR(f.cost_share, seconds / r.duration_seconds, 1e-12);
  EXPECT_EQ(f.level, gpumem::severity_for_cost(f.cost_share, th));
  EXPECT_GT(f.level, severity::info) << "this example moves hundreds of granules in 83 ms: " << f.summary;
  EXPECT_EQ(f.at("alternative_idle_budget"), 0.05);
  EXPECT_GE(f.at("alternative_fragmentation"), 1.0);
}

// The reserve beside it: the size starts at what the pool growing first reaches in two passes and
// grows by sixteenths of that while the default pool's second pass on it still remaps; on the
// reserve quoted it remaps far less than without one (this example: none against ~740 granules
// per 1000 ops, on 440 MiB and 2/16 more; on 440 MiB alone ~15).
TEST(Doctor, SlowPathRemappingQuotesAnInitialReserveSizedByGrowingFirst) {
  const auto t = varlen_example();
  const auto r = gpumem::diagnose(t, with_the_real_replay());
  const auto& f = must_find(r, "slow-path-remapping");
  gpumem::detail::pool_tuning tuning;
  tuning.grow_before_reclaim = true;
  gpumem::replay_options o;
  o.passes = 2;
  o.tuning = &tuning;
  const gpumem::replay_result growing = gpumem::replay(t, o);
  const std::size_t grown = growing.peak_reserved_bytes;
  EXPECT_EQ(f.at("reserve_growing_first_bytes"), static_cast<double>(grown));
  const auto reserve = static_cast<std::size_t>(f.at("reserve_bytes"));
  ASSERT_GE(reserve, grown);
  ASSERT_EQ((reserve - grown) % (grown / 16), 0u);
  EXPECT_LE((reserve - grown) / (grown / 16), 4u);
  if (reserve > grown) {
    // The search went on only while the default pool's second pass still remapped.
    gpumem::replay_options d;
    d.passes = 2;
    d.pool.initial_reserve_bytes = reserve - grown / 16;
    const gpumem::replay_result smaller = gpumem::replay(t, d);
    EXPECT_GT(smaller.pass_log.at(1).granules_moved, smaller.pass_log.at(0).granules_moved);
  }
  EXPECT_GE(f.at("reserve_bytes"), static_cast<double>(r.peak_live_bytes));
  EXPECT_LT(f.at("reserve_second_pass_granules_remapped_per_1000_ops"), 0.1 * f.at("granules_moved_per_1000_ops"));
  EXPECT_GE(f.at("reserve_fragmentation"), 1.0);
  EXPECT_NE(f.summary.find("initial reserve of"), std::string::npos) << f.summary;
  EXPECT_NE(f.advice.find("initial_reserve_bytes"), std::string::npos) << f.advice;
  // The idle budget is the policy's setting, not an option: the advice names none a user cannot set.
  EXPECT_EQ(f.advice.find("pool_options::idle_budget"), std::string::npos) << f.advice;
}

// A replay that cannot hold the reserve costs the finding its reserve figures, not the finding.
TEST(Doctor, SlowPathRemappingKeepsItsFindingWhenTheReserveCannotBeReplayed) {
  auto opts = with_the_real_replay();
  opts.replayer = [](const gpumem::trace& tr, const gpumem::replay_options& o) {
    if (o.pool.initial_reserve_bytes > 0) throw std::invalid_argument("reserve refused here");
    return gpumem::replay(tr, o);
  };
  const auto r = gpumem::diagnose(varlen_example(), opts);
  const auto& f = must_find(r, "slow-path-remapping");
  EXPECT_THROW((void)f.at("reserve_bytes"), std::out_of_range);
  EXPECT_EQ(f.summary.find("initial reserve"), std::string::npos);
  EXPECT_NE(std::find(r.skipped.begin(), r.skipped.end(), "slow-path-remapping's initial reserve: reserve refused here"),
            r.skipped.end());
}

// Growth is not a move: a pool that only mapped the granules of its peak reserve raises nothing.
TEST(Doctor, SlowPathRemappingIsQuietWhenNothingMoved) {
  std::vector<std::string> asked;
  doctor_options opts;
  opts.replayer = fake_replayer{24 * MiB, &asked};  // 12 granules mapped, 12 reserved: growth
  const auto r = gpumem::diagnose(clean_trace().get(), opts);
  EXPECT_EQ(r.find("slow-path-remapping"), nullptr);
  EXPECT_EQ(asked.size(), 1u);
}

// ---- former false alarms that stay quiet, and real problems that still fire (real replays) ----

// Live memory under a granule once read as a fragmentation error of 32,768x (2 MiB for 64 B).
TEST(Doctor, TinyLiveMemoryIsNotJudgedForFragmentation) {
  trace_builder b;
  for (int i = 0; i < 20; ++i) b.free(b.alloc(64), 64);
  const auto r = gpumem::diagnose(b.get(), with_the_real_replay());
  const auto& f = must_find(r, "fragmentation");
  EXPECT_EQ(f.level, severity::info);
  EXPECT_EQ(f.cost_bytes, 0);
  EXPECT_NE(f.summary.find("live memory under 4 granules: fragmentation is not meaningful at this size"),
            std::string::npos) << f.summary;
  EXPECT_EQ(f.advice.find("remap"), std::string::npos) << f.advice;
}

// The bundled clean example once drew a fragmentation warning (1.37x of raw peak live).
TEST(Doctor, BundledCleanExampleHasNothingAboveInfo) {
  const auto t = gpumem::read_trace(std::filesystem::path(GPUMEM_EXAMPLES) / "small_training.csv");
  const auto r = gpumem::diagnose(t, with_the_real_replay());
  for (const auto& f : r.findings) { EXPECT_EQ(f.level, severity::info) << f.id << ": " << f.summary; }
  const auto& f = must_find(r, "fragmentation");
  EXPECT_GE(f.at("pool_peak_reserved_bytes"), f.at("bound_bytes"));
  EXPECT_GT(f.at("bound_bytes"), f.at("peak_live_bytes"));  // 24.9 MiB live: 13 granules
}

// A pool that only grows (maps each granule once, unmaps none) once drew slow-path-remapping.
TEST(Doctor, GrowthWithoutMovesRaisesNoRemapping) {
  trace_builder b;
  std::vector<std::uint64_t> ps;
  for (int i = 0; i < 50; ++i) ps.push_back(b.alloc(4 * MiB));
  for (auto p : ps) b.free(p, 4 * MiB);
  const gpumem::replay_result direct = gpumem::replay(b.get(), {});
  ASSERT_GT(direct.stats.maps, 0u);
  ASSERT_EQ(direct.stats.unmaps, 0u);
  const auto r = gpumem::diagnose(b.get(), with_the_real_replay());
  EXPECT_EQ(r.find("slow-path-remapping"), nullptr);
  // And the bundled pinned trace read as a device trace: 793 granules grown, none moved.
  const auto pinned = gpumem::read_trace(std::filesystem::path(GPUMEM_EXAMPLES) / "pinned_host.csv");
  EXPECT_EQ(gpumem::diagnose(pinned, with_the_real_replay()).find("slow-path-remapping"), nullptr);
}

// Real fragmentation: 2000 blocks of 1.5 MiB, every other one kept, pin granules half used while
// 6 MiB blocks come on top: 7.3 GiB live, over a GiB reserved above the bound: a warning on 80 GiB.
TEST(Doctor, RealFragmentationOnALargeTraceStillFires) {
  trace_builder b;
  const std::uint64_t small = 3 * MiB / 2, big = 6 * MiB;
  std::vector<std::uint64_t> kept, gone, bigs;
  for (int i = 0; i < 2000; ++i) (i % 2 ? gone : kept).push_back(b.alloc(small));
  for (auto p : gone) b.free(p, small);
  for (int i = 0; i < 1000; ++i) bigs.push_back(b.alloc(big));
  for (auto p : bigs) b.free(p, big);
  for (auto p : kept) b.free(p, small);
  const auto r = gpumem::diagnose(b.get(), with_the_real_replay());
  const auto& f = must_find(r, "fragmentation");
  EXPECT_GE(f.at("wasted_bytes"), double(GiB)) << f.summary;
  EXPECT_EQ(f.level, severity::warning) << f.summary;
  EXPECT_DOUBLE_EQ(f.cost_share, f.at("wasted_bytes") / double(80 * GiB));
}

// Findings come costliest first, each severity from its cost.
TEST(Doctor, FindingsAreSortedByCost) {
  const auto t = gpumem::read_trace(std::filesystem::path(GPUMEM_EXAMPLES) / "pitfalls.csv");
  const doctor_options opts = with_the_real_replay();
  const auto r = gpumem::diagnose(t, opts);
  ASSERT_GE(r.findings.size(), 5u);
  EXPECT_EQ(r.findings.front().id, "alloc-failure");
  for (std::size_t i = 1; i < r.findings.size(); ++i)
    EXPECT_GE(r.findings[i - 1].cost_share, r.findings[i].cost_share) << r.findings[i].id;
  for (const auto& f : r.findings) { EXPECT_EQ(f.level, gpumem::severity_for_cost(f.cost_share, opts.thresholds)) << f.id; }
}

// ---- pinned-memory: a pinned host trace judged against the pinned cap ----

namespace {

// The device trace is the clean one, so whatever is above info comes from the pinned trace.
gpumem::doctor_report diagnose_pinned(const gpumem::trace& pinned, std::uint64_t cap_bytes) {
  doctor_options opts;
  opts.pinned = &pinned;
  opts.pinned_cap_bytes = cap_bytes;
  return gpumem::diagnose(clean_trace().get(), opts);
}

// A data loader's pinned traffic: `batches` times, pin a staging buffer, copy, unpin it.
void pin_per_batch(trace_builder& b, int batches, std::uint64_t size) {
  for (int i = 0; i < batches; ++i) {
    const std::uint64_t p = b.alloc(size);
    b.free(p, size);
  }
}

}  // namespace

TEST(DoctorPinned, OverTheCapIsAnError) {
  trace_builder b(1000, "pinned");  // a row every millisecond
  const std::uint64_t x = b.alloc(400 * MiB);
  const std::uint64_t y = b.alloc(400 * MiB);
  const std::uint64_t z = b.alloc(400 * MiB);
  b.free(z, 400 * MiB);
  b.free(y, 400 * MiB);
  b.free(x, 400 * MiB);
  const auto r = diagnose_pinned(b.get(), GiB);
  const auto& f = must_find(r, "pinned-memory");
  EXPECT_EQ(f.level, severity::error);
  EXPECT_EQ(r.worst(), severity::error);
  EXPECT_EQ(r.pinned_trace, "pinned");
  EXPECT_EQ(f.at("peak_pinned_bytes"), 1200 * MiB);
  EXPECT_EQ(f.at("pinned_cap_bytes"), GiB);
  EXPECT_DOUBLE_EQ(f.at("peak_share_of_cap"), 1200.0 / 1024.0);
  EXPECT_EQ(f.at("peak_pinned_line"), 4);  // header, then the third allocation
  EXPECT_EQ(f.at("pinned_allocations"), 3);
  EXPECT_DOUBLE_EQ(f.at("pinned_allocations_per_second"), 3 / 0.005);  // 6 rows, 5 ms apart
  EXPECT_THROW((void)f.at("pinned_allocations_per_1000_ops"), std::out_of_range);
  EXPECT_EQ(f.at("largest_pinned_allocation_bytes"), 400 * MiB);
  EXPECT_EQ(f.at("repinned_allocations"), 0);
  EXPECT_EQ(f.at("pinned_failed_requests"), 0);
  EXPECT_NE(f.advice.find("cannot swap"), std::string::npos) << f.advice;
  for (const auto& s : r.skipped) { EXPECT_EQ(s.find("pinned-memory"), std::string::npos) << s; }
}

// 80% of the cap is the line: just under it is info, at or above it a warning.
TEST(DoctorPinned, NearTheCapIsAWarning) {
  for (const auto& [held_mib, level] : {std::pair{790u, severity::info}, std::pair{800u, severity::warning},
                                        std::pair{950u, severity::warning}}) {
    trace_builder b(1000);
    const std::uint64_t p = b.alloc(held_mib * MiB);
    b.free(p, held_mib * MiB);
    const auto& f = must_find(diagnose_pinned(b.get(), 1000 * MiB), "pinned-memory");
    EXPECT_EQ(f.level, level) << held_mib;
    EXPECT_DOUBLE_EQ(f.at("peak_share_of_cap"), held_mib / 1000.0);
    EXPECT_EQ(f.at("peak_pinned_bytes"), held_mib * MiB);
  }
}

// 19 re-pins at 1 ms each in 41 rows 10 ms apart: 4.6% of the job's time, a warning.
TEST(DoctorPinned, PinningPerBatchIsAWarning) {
  trace_builder b(10'000);
  const std::uint64_t kept = b.alloc(256 * MiB);  // held all along: not churn
  pin_per_batch(b, 20, 64 * MiB);                 // 19 of these re-pin the size just freed
  b.free(kept, 256 * MiB);
  const auto& f = must_find(diagnose_pinned(b.get(), 8 * GiB), "pinned-memory");
  EXPECT_NEAR(f.at("repin_time_share"), 19e-3 / 0.41, 1e-12);
  EXPECT_EQ(f.level, severity::warning);
  EXPECT_EQ(f.at("pinned_allocations"), 21);
  EXPECT_EQ(f.at("repinned_allocations"), 19);
  EXPECT_DOUBLE_EQ(f.at("repinned_share"), 19.0 / 21.0);
  EXPECT_EQ(f.at("peak_pinned_bytes"), 320 * MiB);
  EXPECT_DOUBLE_EQ(f.at("peak_share_of_cap"), 320.0 / 8192.0);  // far from the cap: churn alone
  EXPECT_EQ(f.at("largest_pinned_allocation_bytes"), 256 * MiB);
  EXPECT_NE(f.advice.find("staging buffer"), std::string::npos) << f.advice;
}

// Re-pins cost their time against the pinned trace's: 7 re-pins (7 ms) in 16 rows a second apart
// (15 s) are 0.05%, info; the same at 10 ms a row (150 ms), 4.7%, a warning; at 1 ms a row, an error.
TEST(DoctorPinned, RepinsCostTheirTime) {
  for (const auto& [step_us, level] : {std::pair{1'000'000, severity::info}, std::pair{10'000, severity::warning},
                                       std::pair{1'000, severity::error}}) {
    trace_builder b(step_us);
    pin_per_batch(b, 8, 64 * MiB);
    const auto& f = must_find(diagnose_pinned(b.get(), 8 * GiB), "pinned-memory");
    EXPECT_EQ(f.at("repinned_allocations"), 7);
    EXPECT_DOUBLE_EQ(f.at("repin_seconds"), 7e-3);
    EXPECT_EQ(f.level, level) << step_us;
  }
}

// A re-pin is exactly the size of a block freed earlier, each free matched at most once.
TEST(DoctorPinned, RepinsMatchFreedSizesOnce) {
  trace_builder b(1000);
  const std::uint64_t a = b.alloc(MiB);
  const std::uint64_t c = b.alloc(MiB);
  b.free(a, MiB);
  b.free(c, MiB);
  (void)b.alloc(MiB);      // re-pin 1
  (void)b.alloc(MiB);      // re-pin 2
  (void)b.alloc(MiB);      // both frees are used up: a fresh pin
  (void)b.alloc(2 * MiB);  // no 2 MiB block was ever freed
  const auto& f = must_find(diagnose_pinned(b.get(), 8 * GiB), "pinned-memory");
  EXPECT_EQ(f.at("pinned_allocations"), 6);
  EXPECT_EQ(f.at("repinned_allocations"), 2);
}

TEST(DoctorPinned, ModestSteadyUseIsInfo) {
  trace_builder b(1000);
  std::vector<std::uint64_t> ring;
  for (int i = 0; i < 4; ++i) ring.push_back(b.alloc(32 * MiB));  // a ring of staging buffers
  b.wait(10'000'000);                                             // reused for ten seconds
  for (auto p : ring) b.free(p, 32 * MiB);
  const auto r = diagnose_pinned(b.get(), 8 * GiB);
  const auto& f = must_find(r, "pinned-memory");
  EXPECT_EQ(f.level, severity::info);
  EXPECT_EQ(r.worst(), severity::info);
  EXPECT_EQ(f.at("peak_pinned_bytes"), 128 * MiB);
  EXPECT_DOUBLE_EQ(f.at("peak_share_of_cap"), 128.0 / 8192.0);
  EXPECT_EQ(f.at("pinned_allocations"), 4);
  EXPECT_DOUBLE_EQ(f.at("pinned_allocations_per_second"), 4 / 10.007);  // 7 gaps of 1 ms + 10 s
  EXPECT_EQ(f.at("largest_pinned_allocation_bytes"), 32 * MiB);
  EXPECT_EQ(f.at("repinned_allocations"), 0);
}

TEST(DoctorPinned, UntimedTraceRatesPer1000Ops) {
  trace_builder b;
  b.untimed();
  pin_per_batch(b, 3, MiB);
  const auto& f = must_find(diagnose_pinned(b.get(), 8 * GiB), "pinned-memory");
  EXPECT_DOUBLE_EQ(f.at("pinned_allocations_per_1000_ops"), 500.0);  // 3 of 6 rows
  EXPECT_THROW((void)f.at("pinned_allocations_per_second"), std::out_of_range);
}

TEST(DoctorPinned, RefusedRequestsAreAnErrorEvenUnderTheCap) {
  trace_builder b(1000);
  const std::uint64_t p = b.alloc(MiB);
  b.fail(4 * GiB);
  b.free(p, MiB);
  const auto& f = must_find(diagnose_pinned(b.get(), 8 * GiB), "pinned-memory");
  EXPECT_EQ(f.level, severity::error);
  EXPECT_EQ(f.at("pinned_failed_requests"), 1);
  EXPECT_EQ(f.at("peak_pinned_bytes"), MiB);
}

TEST(DoctorPinned, DefaultCapIsAFifthOfPhysicalRam) {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  ASSERT_GT(pages, 0);
  ASSERT_GT(page, 0);
  const std::uint64_t ram = std::uint64_t(pages) * std::uint64_t(page);
  EXPECT_EQ(gpumem::physical_ram_bytes(), ram);
  EXPECT_EQ(gpumem::default_pinned_cap_bytes(), ram / 5);
  trace_builder b(1000);
  pin_per_batch(b, 1, MiB);
  const auto& f = must_find(diagnose_pinned(b.get(), 0), "pinned-memory");  // 0: the default
  EXPECT_EQ(f.at("pinned_cap_bytes"), static_cast<double>(ram / 5));
  EXPECT_NE(f.summary.find("the default: 20% of this machine's RAM"), std::string::npos) << f.summary;
}

TEST(DoctorPinned, SkippedWithoutAPinnedTraceOrWhenItAllocatesNothing) {
  const auto r = gpumem::diagnose(clean_trace().get());
  EXPECT_EQ(r.find("pinned-memory"), nullptr);
  EXPECT_TRUE(r.pinned_trace.empty());
  EXPECT_EQ(r.skipped.back(), "pinned-memory: no pinned trace given (--pinned)");

  const gpumem::trace empty{"empty.csv", {}, {}, {}};
  const auto e = diagnose_pinned(empty, GiB);
  EXPECT_EQ(e.find("pinned-memory"), nullptr);
  EXPECT_EQ(e.skipped.back(), "pinned-memory: the pinned trace allocates nothing");
}

namespace {

// Stands in for pinned_host_resource where there is no CUDA: host memory behind the same kind of
// cap check, refusing with out_of_memory, so the trace_adaptor records what it would record.
struct capped_host_resource {
  std::size_t cap;
  std::size_t live = 0;
  void* allocate(std::size_t bytes, std::size_t = gpumem::default_alignment, gpumem::stream_ref s = {}) {
    if (live + bytes > cap) {
      gpumem::oom_report r;
      r.requested_bytes = bytes;
      r.stream = s;
      r.live_bytes = live;
      r.limit_bytes = cap;
      throw gpumem::out_of_memory(std::move(r));
    }
    void* p = std::malloc(bytes);
    if (!p) throw std::bad_alloc();
    live += bytes;
    return p;
  }
  void deallocate(void* p, std::size_t bytes, std::size_t = gpumem::default_alignment,
                  gpumem::stream_ref = {}) noexcept {
    std::free(p);
    live -= bytes;
  }
};

}  // namespace

// End to end: the file a trace_adaptor writes around a capped host resource, read back and judged.
TEST(DoctorPinned, TraceWrittenByTheAdaptor) {
  const auto path = gpumem::testing_support::unique_temp_path("pinned", ".csv");
  {
    capped_host_resource host{4 * MiB};
    gpumem::trace_adaptor<capped_host_resource> traced(host, path);
    for (int i = 0; i < 10; ++i) traced.deallocate(traced.allocate(MiB), MiB);  // pin per batch
    void* kept = traced.allocate(3 * MiB);
    EXPECT_THROW((void)traced.allocate(2 * MiB), gpumem::out_of_memory);  // 5 MiB > the 4 MiB cap
    traced.deallocate(kept, 3 * MiB);
  }
  const gpumem::trace pinned = gpumem::read_trace(path);
  std::filesystem::remove(path);
  const auto r = diagnose_pinned(pinned, 4 * MiB);
  const auto& f = must_find(r, "pinned-memory");
  EXPECT_EQ(f.level, severity::error);  // the resource refused a request
  EXPECT_EQ(r.pinned_trace, path.string());
  EXPECT_EQ(f.at("pinned_failed_requests"), 1);
  EXPECT_EQ(f.at("pinned_allocations"), 11);
  EXPECT_EQ(f.at("repinned_allocations"), 9);
  EXPECT_EQ(f.at("peak_pinned_bytes"), 3 * MiB);
  EXPECT_DOUBLE_EQ(f.at("peak_share_of_cap"), 0.75);
  EXPECT_EQ(f.at("largest_pinned_allocation_bytes"), 3 * MiB);
  EXPECT_EQ(f.at("peak_pinned_line"), 22);  // header + 20 rows of batches, then the kept buffer
}
