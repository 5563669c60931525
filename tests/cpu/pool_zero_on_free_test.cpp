// Zero-on-free: freed memory is cleared before another user of the pool can get it.
#include <gtest/gtest.h>

#include <random>
#include <stdexcept>
#include <string>

#include "gpumem/pool.hpp"
#include "gpumem/sim_device.hpp"

namespace {

using gpumem::pool;
using gpumem::pool_options;
using gpumem::sim_device;
using gpumem::sim_options;

TEST(ZeroOnFree, EveryFreedBlockIsZeroedOnceWhatever) {
  sim_device dev(sim_options{.capacity_bytes = std::size_t{8} << 30});
  pool p(dev.memory(), dev.streams(), pool_options{.zero_on_free = true});
  std::mt19937_64 rng(7);
  std::size_t requested = 0;
  for (int i = 0; i < 2000; ++i) {
    const std::size_t bytes = std::size_t{1} << (rng() % 24);
    void* a = p.allocate(bytes);
    const std::uint64_t before = dev.zeroed_bytes();
    p.deallocate(a, bytes);
    const std::uint64_t zeroed = dev.zeroed_bytes() - before;
    // The whole block is cleared: at least the bytes asked for, at most their rounding.
    EXPECT_GE(zeroed, bytes) << "block of " << bytes << " B";
    EXPECT_LE(zeroed, bytes + bytes / 8 + 256) << "block of " << bytes << " B";
    requested += bytes;
  }
  EXPECT_GE(dev.zeroed_bytes(), requested);
  p.check_invariants();
}

TEST(ZeroOnFree, OffByDefault) {
  sim_device dev;
  pool p(dev.memory(), dev.streams());
  void* a = p.allocate(1 << 20);
  p.deallocate(a, 1 << 20);
  EXPECT_EQ(dev.zeroed_bytes(), 0u);
}

TEST(ZeroOnFree, BlockUsedOnAnotherStreamIsZeroedAfterWaitingForIt) {
  sim_device dev;
  pool p(dev.memory(), dev.streams(), pool_options{.zero_on_free = true});
  const auto a = dev.create_stream(), b = dev.create_stream();
  void* x = p.allocate(4 << 20, 256, a);
  p.record_use(x, b);
  const std::uint64_t events = dev.events_recorded();
  p.deallocate(x, 4 << 20, 256, a);
  EXPECT_GE(dev.zeroed_bytes(), std::uint64_t{4} << 20);
  EXPECT_GT(dev.events_recorded(), events) << "the zeroing must be ordered after stream b's use";
}

// An upstream that forwards to the simulator but cannot zero memory.
class no_zero_upstream final : public gpumem::upstream {
 public:
  explicit no_zero_upstream(gpumem::upstream& u) : u_(u) {}
  std::string name() const override { return "no-zero"; }
  std::size_t granularity() const noexcept override { return u_.granularity(); }
  bool supports_virtual() const noexcept override { return u_.supports_virtual(); }
  std::size_t capacity_bytes() const noexcept override { return u_.capacity_bytes(); }
  void* allocate_segment(std::size_t b) override { return u_.allocate_segment(b); }
  void free_segment(void* p, std::size_t b) noexcept override { u_.free_segment(p, b); }
  void* reserve_range(std::size_t b) override { return u_.reserve_range(b); }
  void release_range(void* p, std::size_t b) noexcept override { u_.release_range(p, b); }
  std::optional<gpumem::physical_handle> create_physical(std::size_t b) override { return u_.create_physical(b); }
  void release_physical(gpumem::physical_handle h, std::size_t b) noexcept override { u_.release_physical(h, b); }
  void map(void* at, std::size_t b, gpumem::physical_handle h) override { u_.map(at, b, h); }
  void unmap(void* at, std::size_t b) noexcept override { u_.unmap(at, b); }

 private:
  gpumem::upstream& u_;
};

TEST(ZeroOnFree, AnUpstreamThatCannotZeroIsAClearError) {
  sim_device dev;
  no_zero_upstream up(dev.memory());
  try {
    pool p(up, dev.streams(), pool_options{.zero_on_free = true});
    FAIL() << "expected std::invalid_argument";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("zero_on_free"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("no-zero"), std::string::npos) << e.what();
  }
}

}  // namespace
