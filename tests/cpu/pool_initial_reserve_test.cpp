// pool_options::initial_reserve_bytes: the pool takes its reserve from the upstream when it is
// made, requests that fit in it map nothing more on any stream, and a reserve the upstream (or
// the pool's own limit) cannot give fails the construction with a report that names the option.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "gpumem/errors.hpp"
#include "gpumem/detail/pool_tuning.hpp"
#include "gpumem/pool.hpp"
#include "gpumem/sim_device.hpp"

namespace {

using namespace gpumem;
constexpr std::size_t MiB = std::size_t{1} << 20;

sim_options device(bool virtual_memory, std::size_t capacity = std::size_t{1} << 30) {
  sim_options so;
  so.capacity_bytes = capacity;
  so.virtual_memory = virtual_memory;
  so.auto_complete = true;
  return so;
}

class InitialReserve : public ::testing::TestWithParam<bool> {};  // true: virtual upstream

TEST_P(InitialReserve, IsHeldFromTheStartAndServesEveryStreamWithoutGrowth) {
  sim_device dev(device(GetParam()));
  const stream_ref a = dev.create_stream(), b = dev.create_stream();
  for (const bool grow_first : {false, true}) {
    pool_options po;
    po.initial_reserve_bytes = 100 * MiB + 1;  // not a whole granule: rounded up
    detail::pool_tuning tuning;
    tuning.grow_before_reclaim = grow_first;
    pool p(dev.memory(), dev.streams(), po, tuning);
    const pool_stats start = p.stats();
    EXPECT_GE(start.reserved_bytes, 100 * MiB + 1);
    EXPECT_LE(start.reserved_bytes, 102 * MiB);
    EXPECT_EQ(start.peak_reserved_bytes, start.reserved_bytes);
    p.check_invariants();
    // Large and small requests on three streams, 90 MiB in all: all inside the reserve.
    std::vector<std::pair<void*, std::size_t>> held;
    for (const stream_ref s : {stream_ref{0}, a, b}) {
      held.emplace_back(p.allocate(24 * MiB, default_alignment, s), 24 * MiB);
      held.emplace_back(p.allocate(5 * MiB, default_alignment, s), 5 * MiB);
      for (int i = 0; i < 16; ++i) held.emplace_back(p.allocate(4096, default_alignment, s), 4096);
    }
    p.check_invariants();
    const pool_stats used = p.stats();
    EXPECT_EQ(used.reserved_bytes, start.reserved_bytes) << "grow_first " << grow_first;
    EXPECT_EQ(used.maps, start.maps) << "no granule mapped beyond the reserve";
    EXPECT_EQ(used.upstream_calls, start.upstream_calls);
    std::size_t k = 0;
    for (const stream_ref s : {stream_ref{0}, a, b})
      for (int i = 0; i < 18; ++i, ++k) p.deallocate(held[k].first, held[k].second, default_alignment, s);
    p.check_invariants();
    // A request past the reserve still grows the pool.
    void* big = p.allocate(200 * MiB, default_alignment, stream_ref{});
    EXPECT_GT(p.stats().reserved_bytes, start.reserved_bytes);
    p.deallocate(big, 200 * MiB, default_alignment, stream_ref{});
    p.trim();
    EXPECT_EQ(p.stats().live_bytes, 0u);
  }
}

TEST_P(InitialReserve, ThatTheDeviceOrTheLimitCannotGiveFailsTheConstruction) {
  sim_device dev(device(GetParam(), 64 * MiB));
  pool_options po;
  po.initial_reserve_bytes = 128 * MiB;
  try {
    pool p(dev.memory(), dev.streams(), po);
    FAIL() << "a reserve twice the device was granted";
  } catch (const out_of_memory& e) {
    EXPECT_NE(std::string(e.what()).find("initial_reserve_bytes"), std::string::npos) << e.what();
    EXPECT_EQ(e.report().requested_bytes, 128 * MiB);
  }
  po.initial_reserve_bytes = 32 * MiB;
  po.max_reserved_bytes = 16 * MiB;
  EXPECT_THROW(pool(dev.memory(), dev.streams(), po), out_of_memory) << "past max_reserved_bytes";
  // Nothing leaked from the failed attempts: the whole device can still be had.
  po.max_reserved_bytes = pool_options{}.max_reserved_bytes;
  po.initial_reserve_bytes = 64 * MiB;
  pool p(dev.memory(), dev.streams(), po);
  EXPECT_EQ(p.stats().reserved_bytes, 64 * MiB);
  void* x = p.allocate(60 * MiB, default_alignment, stream_ref{});
  p.deallocate(x, 60 * MiB, default_alignment, stream_ref{});
}

TEST(InitialReserveOptions, OverTheReleaseThresholdIsRefusedByName) {
  sim_device dev(device(true));
  pool_options po;
  po.initial_reserve_bytes = 64 * MiB;
  po.release_threshold_bytes = 32 * MiB;
  try {
    pool p(dev.memory(), dev.streams(), po);
    FAIL() << "a reserve the pool would give back at once was taken";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("initial_reserve_bytes"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("release_threshold_bytes"), std::string::npos) << e.what();
  }
}

INSTANTIATE_TEST_SUITE_P(Upstreams, InitialReserve, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& i) { return i.param ? "Virtual" : "Segments"; });

}  // namespace
