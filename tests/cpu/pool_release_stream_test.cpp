// release_stream: a stream can be destroyed once the pool has let go of it; the pool never
// touches it again, and what it held serves other streams.
#include <gtest/gtest.h>

#include <vector>

#include "gpumem/pool.hpp"
#include "gpumem/sim_device.hpp"

namespace {

using gpumem::pool;
using gpumem::sim_device;
using gpumem::sim_options;

TEST(ReleaseStream, TheStreamIsNeverUsedAgainAndItsMemoryServesOthers) {
  sim_device dev(sim_options{.capacity_bytes = std::size_t{64} << 20});
  pool p(dev.memory(), dev.streams());
  const auto s = dev.create_stream(), t = dev.create_stream();
  std::vector<void*> small, large;
  for (int i = 0; i < 64; ++i) small.push_back(p.allocate(4096, 256, s));
  for (int i = 0; i < 8; ++i) large.push_back(p.allocate(std::size_t{4} << 20, 256, s));
  void* shared = p.allocate(8192, 256, t);
  p.record_use(shared, s);
  for (void* x : small) p.deallocate(x, 4096, 256, s);
  for (void* x : large) p.deallocate(x, std::size_t{4} << 20, 256, s);

  p.release_stream(s);
  dev.destroy_stream(s);  // from here any event recorded on s throws

  // Memory pressure on t: the 32 MiB s freed must serve t (the device holds only 64 MiB), and no
  // path may record on s — trim, frees of blocks used on s, the out-of-memory path.
  std::vector<void*> on_t;
  for (int i = 0; i < 14; ++i) on_t.push_back(p.allocate(std::size_t{4} << 20, 256, t));
  p.deallocate(shared, 8192, 256, t);
  for (void* x : on_t) p.deallocate(x, std::size_t{4} << 20, 256, t);
  EXPECT_NO_THROW(p.trim());
  p.check_invariants();
  EXPECT_EQ(p.stats().live_bytes, 0u);
}

TEST(ReleaseStream, WithoutItADestroyedStreamIsRecordedOn) {
  // The hazard release_stream exists for: the simulator refuses it, as a GPU would crash.
  sim_device dev(sim_options{.capacity_bytes = std::size_t{64} << 20});
  pool p(dev.memory(), dev.streams());
  const auto s = dev.create_stream();
  void* x = p.allocate(std::size_t{4} << 20, 256, s);
  p.deallocate(x, std::size_t{4} << 20, 256, s);
  dev.destroy_stream(s);
  EXPECT_THROW(p.trim(), std::logic_error);
}

}  // namespace
