// Per-device pools on several simulated devices: one pool per device on that device's memory,
// chosen by the calling thread's current device, built once under concurrent first use; an
// out-of-memory on one device leaves the others untouched; bad indices are refused with the reason.
#include <gtest/gtest.h>

#include <atomic>
#include <barrier>
#include <string>
#include <thread>
#include <vector>

#include "gpumem/per_device.hpp"
#include "gpumem/sim_devices.hpp"

namespace {

using namespace gpumem;
constexpr std::size_t MiB = std::size_t{1} << 20;

sim_devices three_devices() {
  return sim_devices({sim_options{.capacity_bytes = 64 * MiB},
                      sim_options{.capacity_bytes = 32 * MiB},
                      sim_options{.capacity_bytes = 16 * MiB, .virtual_memory = false}});
}

TEST(SimDevices, EachDeviceHasItsOwnCapacityAndAddresses) {
  sim_devices devs = three_devices();
  ASSERT_EQ(devs.count(), 3);
  EXPECT_EQ(devs.device(0).capacity_bytes(), 64 * MiB);
  EXPECT_EQ(devs.device(1).capacity_bytes(), 32 * MiB);
  EXPECT_EQ(devs.device(2).capacity_bytes(), 16 * MiB);
  EXPECT_THROW(devs.device(3), std::out_of_range);
  EXPECT_THROW(devs.device(-1), std::out_of_range);
  EXPECT_THROW(sim_devices({}), std::invalid_argument);
  EXPECT_EQ(devs.current(), 0) << "a thread starts on device 0, as with CUDA";
  devs.set_current(2);
  EXPECT_EQ(devs.current(), 2);
  EXPECT_THROW(devs.set_current(3), std::out_of_range);
  EXPECT_EQ(devs.current(), 2) << "a refused choice keeps the current device";
  int other = -1;
  std::thread([&] { other = devs.current(); }).join();
  EXPECT_EQ(other, 0) << "the current device is per thread";
}

TEST(PerDevice, PoolsComeFromTheCurrentDevicesMemory) {
  sim_devices devs = three_devices();
  auto pools = devs.make_pools();
  ASSERT_EQ(pools->device_count(), 3);
  EXPECT_EQ(pools->find(0), nullptr) << "nothing is built before first use";
  std::vector<void*> blocks(3);
  for (int d = 0; d < 3; ++d) {
    devs.set_current(d);
    pool& p = pools->current();
    EXPECT_EQ(&p, &pools->get(d));
    EXPECT_EQ(&p, pools->find(d));
    blocks[static_cast<std::size_t>(d)] = p.allocate(3 * MiB);
    EXPECT_EQ(devs.device_of(blocks[static_cast<std::size_t>(d)]), d)
        << "device " << d << "'s pool handed out another device's memory";
    EXPECT_TRUE(devs.device(d).is_mapped(blocks[static_cast<std::size_t>(d)], 3 * MiB));
    EXPECT_GE(devs.device(d).used_bytes(), 3 * MiB);
  }
  EXPECT_NE(&pools->get(0), &pools->get(1));
  EXPECT_NE(&pools->get(1), &pools->get(2));
  for (int d = 0; d < 3; ++d) {
    pools->get(d).deallocate(blocks[static_cast<std::size_t>(d)], 3 * MiB);
    pools->get(d).trim();
    EXPECT_EQ(devs.device(d).used_bytes(), 0u) << "device " << d;
  }
}

TEST(PerDevice, OutOfMemoryOnOneDeviceLeavesTheOthersAlone) {
  sim_devices devs = three_devices();
  auto pools = devs.make_pools();
  void* on0 = pools->get(0).allocate(40 * MiB);
  const std::size_t used0 = devs.device(0).used_bytes();
  const pool_stats before0 = pools->get(0).stats();
  // Device 1 has 32 MiB: 40 MiB cannot fit there, though device 0 holds it.
  EXPECT_THROW(pools->get(1).allocate(40 * MiB), out_of_memory);
  EXPECT_EQ(pools->get(1).stats().failed_allocations, 1u);
  EXPECT_EQ(pools->get(0).stats().failed_allocations, 0u);
  EXPECT_EQ(pools->get(0).stats().live_bytes, before0.live_bytes);
  EXPECT_EQ(pools->get(0).stats().reserved_bytes, before0.reserved_bytes);
  EXPECT_EQ(devs.device(0).used_bytes(), used0) << "device 1's failure released device 0's memory";
  // And device 1 still serves what fits.
  void* on1 = pools->get(1).allocate(30 * MiB);
  EXPECT_EQ(devs.device_of(on1), 1);
  EXPECT_LE(devs.device(1).used_bytes(), 32 * MiB);
  pools->get(1).deallocate(on1, 30 * MiB);
  pools->get(0).deallocate(on0, 40 * MiB);
  for (int d = 0; d < 3; ++d) pools->get(d).check_invariants();
}

TEST(PerDevice, ConcurrentFirstUseBuildsOnePoolPerDevice) {
  std::atomic<int> built{0};
  std::atomic<int> chosen{0};
  struct thing { int device; };
  per_device<thing> map(
      4,
      [&](int d) {
        ++built;
        std::this_thread::sleep_for(std::chrono::milliseconds(2));  // widen the race
        return std::make_unique<thing>(thing{d});
      },
      [&] { return chosen.load(); });
  constexpr int threads = 16;
  std::barrier start(threads);
  std::vector<std::thread> ts;
  std::vector<const thing*> seen(threads * 4);
  for (int t = 0; t < threads; ++t)
    ts.emplace_back([&, t] {
      start.arrive_and_wait();
      for (int i = 0; i < 4; ++i) {
        const int d = (t + i) % 4;
        const thing& x = map.get(d);
        EXPECT_EQ(x.device, d);
        seen[static_cast<std::size_t>(t * 4 + d)] = &x;
      }
    });
  for (auto& t : ts) t.join();
  EXPECT_EQ(built.load(), 4) << "a device's object was built more than once";
  for (int t = 0; t < threads; ++t)
    for (int d = 0; d < 4; ++d) EXPECT_EQ(seen[static_cast<std::size_t>(t * 4 + d)], map.find(d));
  chosen = 3;
  EXPECT_EQ(map.current().device, 3);
}

TEST(PerDevice, ThreadsOnDifferentDevicesUseTheirOwnPools) {
  sim_devices devs = three_devices();
  auto pools = devs.make_pools();
  std::vector<std::thread> ts;
  std::atomic<int> wrong{0};
  for (int t = 0; t < 6; ++t)
    ts.emplace_back([&, t] {
      const int d = t % 3;
      devs.set_current(d);
      for (int i = 0; i < 200; ++i) {
        pool& p = pools->current();
        void* a = p.allocate(64 * 1024 + static_cast<std::size_t>(i) * 256);
        if (devs.device_of(a) != d) ++wrong;
        p.deallocate(a, 64 * 1024 + static_cast<std::size_t>(i) * 256);
      }
    });
  for (auto& t : ts) t.join();
  EXPECT_EQ(wrong.load(), 0);
  for (int d = 0; d < 3; ++d) {
    pools->get(d).check_invariants();
    EXPECT_EQ(pools->get(d).stats().live_bytes, 0u);
  }
}

TEST(PerDevice, BadUseIsRefusedWithTheReason) {
  auto make = [](int) { return std::make_unique<int>(1); };
  auto zero = [] { return 0; };
  EXPECT_THROW(per_device<int>(0, make, zero), std::invalid_argument);
  EXPECT_THROW(per_device<int>(2, nullptr, zero), std::invalid_argument);
  EXPECT_THROW(per_device<int>(2, make, nullptr), std::invalid_argument);
  per_device<int> map(2, make, [] { return 5; });
  try {
    map.get(2);
    FAIL() << "device 2 of 2 was accepted";
  } catch (const std::out_of_range& e) {
    EXPECT_NE(std::string(e.what()).find("device 2 is outside [0, 2)"), std::string::npos) << e.what();
  }
  EXPECT_THROW(map.current(), std::out_of_range) << "the current device 5 is not one of the map's";
  EXPECT_EQ(map.find(7), nullptr);
  // A factory that fails builds nothing, and the next use tries again.
  int calls = 0;
  per_device<int> flaky(1, [&](int) -> std::unique_ptr<int> {
    if (++calls == 1) throw std::runtime_error("first try fails");
    return std::make_unique<int>(7);
  }, zero);
  EXPECT_THROW(flaky.get(0), std::runtime_error);
  EXPECT_EQ(flaky.find(0), nullptr);
  EXPECT_EQ(flaky.get(0), 7);
  per_device<int> empty(1, [](int) { return std::unique_ptr<int>(); }, zero);
  EXPECT_THROW(empty.get(0), std::logic_error);
}

}  // namespace
