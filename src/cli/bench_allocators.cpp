// The CPU allocators of `gpumem bench`: gpumem's pool on the simulated device, and glibc malloc as
// a baseline for host-side bookkeeping cost (it never touches device memory either).
#include "bench_allocators.hpp"

#include <cstdlib>
#include <new>

#include "gpumem/pool.hpp"
#include "gpumem/sim_device.hpp"

namespace gpumem::tools {
namespace {

// 1 TiB of virtual device memory, so no pattern (churn keeps ~5 GiB live) runs out.
constexpr std::size_t sim_capacity = std::size_t{1} << 40;

class sim_pool_allocator final : public bench_allocator {
 public:
  sim_pool_allocator() : dev_(options()), pool_(dev_.memory(), dev_.streams(), pool_options{}) {}
  std::string name() const override { return "gpumem-sim"; }
  std::string device() const override { return "simulated"; }
  void* alloc(std::size_t bytes, stream_ref s) override {
    return pool_.allocate(bytes, default_alignment, s);
  }
  void free(void* p, std::size_t bytes, stream_ref s) override {
    pool_.deallocate(p, bytes, default_alignment, s);
  }
  stream_ref create_stream() override { return dev_.create_stream(); }
  bool is_gpumem() const override { return true; }
  std::optional<pool_stats> gpumem_stats() const override { return pool_.stats(); }
  std::size_t granule_bytes() const override { return granule_; }

 private:
  static sim_options options() {
    sim_options o;
    o.capacity_bytes = sim_capacity;
    o.auto_complete = true;  // frees are reusable at once: measures bookkeeping, not waiting
    return o;
  }
  sim_device dev_;
  gpumem::pool pool_;
  std::size_t granule_ = dev_.memory().granularity();
};

class malloc_allocator final : public bench_allocator {
 public:
  std::string name() const override { return "malloc"; }
  std::string device() const override { return "host"; }
  void* alloc(std::size_t bytes, stream_ref) override {
    void* p = std::malloc(bytes);
    if (!p) throw std::bad_alloc();
    return p;
  }
  void free(void* p, std::size_t, stream_ref) override { std::free(p); }
};

}  // namespace

std::vector<bench_allocator_maker> cpu_bench_allocators() {
  return {
      {"gpumem-sim", [] { return std::make_unique<sim_pool_allocator>(); }},
      {"malloc", [] { return std::make_unique<malloc_allocator>(); }},
  };
}

}  // namespace gpumem::tools
