// The replay engine's targets: gpumem's pool on the simulated device (virtual memory or plain
// segments), the exact floor and glibc malloc, and the registry through which other layers (the
// GPU) add theirs.
#include <fmt/format.h>

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <mutex>
#include <stdexcept>

#include "gpumem/detail/pool_tuning.hpp"
#include "gpumem/replay.hpp"
#include "gpumem/sim_device.hpp"

namespace gpumem {
namespace {

using target = replay_target;

std::mutex registry_mutex;
std::vector<std::pair<std::string, replay_target_factory>>& registry() {
  static std::vector<std::pair<std::string, replay_target_factory>> r;
  return r;
}

struct pool_target final : target {
  sim_device dev;
  gpumem::pool p;
  const std::size_t lag;       // replay_options::device_lag_ops
  std::size_t since_done = 0;  // operations since the device last caught up
  pool_target(const replay_options& o, bool virtual_memory)
      : dev(sim_options{.capacity_bytes = o.capacity_bytes,
                        .granularity_bytes = default_granularity,
                        .virtual_memory = virtual_memory,
                        .auto_complete = o.device_lag_ops == 0}),
        p(dev.memory(), dev.streams(), o.pool, o.tuning ? *o.tuning : detail::pool_tuning{}),
        lag(o.device_lag_ops) {}
  void tick() {
    if (lag && ++since_done >= lag) {
      dev.complete_all();
      since_done = 0;
    }
  }
  void* allocate(std::size_t bytes, stream_ref s) override {
    tick();
    try {
      return p.allocate(bytes, default_alignment, s);
    } catch (const out_of_memory&) {
      return nullptr;
    }
  }
  void deallocate(void* ptr, std::size_t bytes, stream_ref s) override {
    tick();
    p.deallocate(ptr, bytes, default_alignment, s);
  }
  std::size_t reserved() override { return p.stats().reserved_bytes; }
  std::size_t peak_reserved() override { return p.stats().peak_reserved_bytes; }
  void settle() override { p.settle(); }
  pool_stats stats() override { return p.stats(); }
  std::vector<block_info> blocks() override { return p.blocks(); }
  // The shadow model, plus: a block the device has not mapped would fault when written (and one
  // mapped to memory already released would write memory that is no longer the pool's).
  std::unique_ptr<replay_verifier> make_verifier() override {
    return make_shadow_verifier([this](const void* ptr, std::size_t bytes) { return dev.is_mapped_live(ptr, bytes); });
  }
};

struct exact_target final : target {
  exact_resource r;
  explicit exact_target(const replay_options& o) : r(o.capacity_bytes) {}
  void* allocate(std::size_t bytes, stream_ref s) override {
    try {
      return r.allocate(bytes, default_alignment, s);
    } catch (const out_of_memory&) {
      return nullptr;
    }
  }
  void deallocate(void* ptr, std::size_t bytes, stream_ref s) override { r.deallocate(ptr, bytes, default_alignment, s); }
  std::size_t reserved() override { return r.live_bytes(); }
  std::size_t peak_reserved() override { return r.peak_live_bytes(); }
};

// glibc malloc/free on the host: a fairness baseline for host-side bookkeeping cost. It reserves
// host memory we cannot see, so its reserved figures are its live ones.
struct malloc_target final : target {
  std::size_t live = 0, peak = 0;
  void* allocate(std::size_t bytes, stream_ref) override {
    void* p = std::malloc(bytes);
    live += bytes;
    peak = std::max(peak, live);
    return p;
  }
  void deallocate(void* ptr, std::size_t bytes, stream_ref) override {
    std::free(ptr);
    live -= bytes;
  }
  std::size_t reserved() override { return live; }
  std::size_t peak_reserved() override { return peak; }
  std::size_t alignment() override { return alignof(std::max_align_t); }
  std::unique_ptr<replay_verifier> make_verifier() override { return make_host_memory_verifier(); }
};

}  // namespace

std::unique_ptr<replay_target> make_replay_target(const replay_options& o) {
  if (o.resource == "pool") return std::make_unique<pool_target>(o, true);
  if (o.resource == "pool-segments") return std::make_unique<pool_target>(o, false);
  if (o.resource == "exact") return std::make_unique<exact_target>(o);
  if (o.resource == "malloc") return std::make_unique<malloc_target>();
  replay_target_factory make;
  {
    std::lock_guard lock(registry_mutex);
    for (const auto& [name, m] : registry())
      if (name == o.resource) make = m;
  }
  // Called without the lock: a factory may make its inner target through here (the tests' wrapped
  // targets do), which would otherwise wait on the lock it holds.
  if (make) return make(o);
  std::string names;
  for (const auto& n : replay_resources()) names += (names.empty() ? "" : ", ") + n;
  throw std::invalid_argument(fmt::format("unknown resource '{}' (known: {})", o.resource, names));
}

std::vector<std::string> replay_resources() {
  std::vector<std::string> names{"pool", "pool-segments", "exact", "malloc"};
  std::lock_guard lock(registry_mutex);
  for (const auto& [name, make] : registry()) names.push_back(name);
  return names;
}

void register_replay_target(const std::string& name, replay_target_factory make) {
  std::lock_guard lock(registry_mutex);
  for (auto& [n, m] : registry())
    if (n == name) {
      m = std::move(make);
      return;
    }
  registry().emplace_back(name, std::move(make));
}

}  // namespace gpumem
