// The default pool with several threads, each on its own stream (the threads pattern of `gpumem
// bench`): a stream that needs a new slab takes it before any cache is emptied, so each stream's
// slabs settle at what its own requests need and small requests stop taking the pool's lock —
// and when the device is full the pool still empties caches rather than fail.
#include <gtest/gtest.h>

#include <barrier>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "gpumem/pool.hpp"
#include "gpumem/sim_device.hpp"
#include "support/pool_model.hpp"

namespace {

using namespace gpumem;
using gpumem::test::KiB;
using gpumem::test::MiB;

struct step {
  std::uint32_t slot;
  std::size_t bytes;
};

// Sizes log-uniform over the slab range, as the threads pattern draws them.
std::vector<step> random_steps(std::uint64_t seed, std::size_t live, std::size_t n) {
  gpumem::test::rng g(seed);
  std::vector<step> out(n);
  for (auto& s : out)
    s = {static_cast<std::uint32_t>(g.below(live)), gpumem::test::log_uniform(g.next(), g.next(), 256, MiB)};
  return out;
}

struct cycle_figures {
  std::size_t reserved = 0;
  std::uint64_t events = 0;
  std::uint64_t slow_allocations = 0;  // allocations the front caches did not serve
};

TEST(ThreadsSettle, EachStreamsSlabsSettleAndSmallRequestsStopTakingThePoolsLock) {
  constexpr int threads = 4, cycles = 4;
  constexpr std::size_t live = 200, steps_per_cycle = 20000;
  sim_device dev(sim_options{.capacity_bytes = std::size_t{1} << 34, .auto_complete = true});
  pool p(dev.memory(), dev.streams(), pool_options{});
  std::vector<stream_ref> streams;
  for (int t = 0; t < threads; ++t) streams.push_back(dev.create_stream());
  std::vector<cycle_figures> after(cycles);
  std::size_t cycle = 0;
  std::barrier sync(threads, [&]() noexcept {
    // Between cycles, with every thread waiting: the pool's figures so far.
    const pool_stats st = p.stats();
    after[cycle++] = {st.reserved_bytes, st.events_recorded,
                                                         st.allocations - st.front_hits};
  });
  std::vector<std::string> errors(threads);
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t)
    workers.emplace_back([&, t] {
      const stream_ref s = streams[std::size_t(t)];
      const std::vector<step> plan = random_steps(std::uint64_t(t) + 1, live, steps_per_cycle);
      std::vector<std::pair<void*, std::size_t>> blocks(live, {nullptr, 0});
      try {
        for (int c = 0; c < cycles; ++c) {
          for (const step& st : plan) {
            auto& b = blocks[st.slot];
            if (b.first) p.deallocate(b.first, b.second, default_alignment, s);
            b = {p.allocate(st.bytes, default_alignment, s), st.bytes};
          }
          sync.arrive_and_wait();
        }
      } catch (const std::exception& e) {
        errors[std::size_t(t)] = e.what();
      }
      for (auto& b : blocks)
        if (b.first) p.deallocate(b.first, b.second, default_alignment, s);
    });
  for (auto& w : workers) w.join();
  for (const auto& e : errors) EXPECT_EQ(e, "");
  // The first cycle fills each stream's slabs; by the last the same requests need nothing new:
  // no growth, no event (no slab went from one stream to another), and next to no slow path.
  EXPECT_EQ(after[cycles - 1].reserved, after[cycles - 2].reserved);
  EXPECT_EQ(after[cycles - 1].events, after[cycles - 2].events);
  const std::uint64_t last_cycle_slow = after[cycles - 1].slow_allocations - after[cycles - 2].slow_allocations;
  EXPECT_LE(last_cycle_slow, threads * steps_per_cycle / 1000) << "slow allocations in the last cycle";
  p.check_invariants();
  for (stream_ref s : streams) {
    p.release_stream(s);
    dev.destroy_stream(s);
  }
}

TEST(ThreadsSettle, AFullDeviceStillEmptiesOtherThreadsCachesRatherThanFail) {
  // 48 MiB of device. One thread's stream fills slabs of one class and frees them all (they stay
  // in its front cache and slabs); another thread's stream then needs slabs of another class that
  // only that memory can give. Growing first fails, so the pool reclaims as before.
  sim_device dev(sim_options{.capacity_bytes = 48 * MiB, .auto_complete = true});
  pool p(dev.memory(), dev.streams(), pool_options{});
  const stream_ref a = dev.create_stream(), b = dev.create_stream();
  std::thread first([&] {
    std::vector<void*> held;
    for (int i = 0; i < 160; ++i) held.push_back(p.allocate(200 * KiB, default_alignment, a));
    for (void* q : held) p.deallocate(q, 200 * KiB, default_alignment, a);
  });
  first.join();
  ASSERT_GT(p.stats().reserved_bytes, 30 * MiB);
  std::thread second([&] {
    std::vector<void*> held;
    EXPECT_NO_THROW(for (int i = 0; i < 300; ++i) held.push_back(p.allocate(100 * KiB, default_alignment, b)));
    for (void* q : held) p.deallocate(q, 100 * KiB, default_alignment, b);
  });
  second.join();
  EXPECT_EQ(p.stats().failed_allocations, 0u);
  EXPECT_LE(p.stats().peak_reserved_bytes, 48 * MiB);
  p.check_invariants();
  p.release_stream(a);
  p.release_stream(b);
  dev.destroy_stream(a);
  dev.destroy_stream(b);
}

}  // namespace
