// A pool on the simulated device, from the installed package: allocate, free, check the stats.
// Prints "package consumer ok" and exits 0 when every check holds, else says which failed.
#include <cstddef>
#include <cstdio>
#include <vector>

// Every installed header of gpumem::gpumem's allocator and simulated device: each must build
// from the package alone.
#include <gpumem/core.hpp>
#include <gpumem/errors.hpp>
#include <gpumem/host_memory.hpp>
#include <gpumem/memory_access.hpp>
#include <gpumem/pool.hpp>
#include <gpumem/pool_option_table.hpp>
#include <gpumem/pool_stats.hpp>
#include <gpumem/resource.hpp>
#include <gpumem/sim_device.hpp>
#include <gpumem/upstream.hpp>

#if CONSUMER_ANALYSIS
#include <sstream>

#include <gpumem/doctor.hpp>
#include <gpumem/guard.hpp>
#include <gpumem/pack.hpp>
#include <gpumem/replay.hpp>
#include <gpumem/replay_verifier.hpp>
#include <gpumem/report.hpp>
#include <gpumem/trace.hpp>
#include <gpumem/trace_adaptor.hpp>
#endif

namespace {

int failures = 0;

void check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "package consumer: %s does not hold\n", what);
    ++failures;
  }
}

}  // namespace

int main() {
  gpumem::sim_device dev;
  {
    gpumem::pool p(dev.memory(), dev.streams());
    std::vector<void*> blocks;
    for (std::size_t bytes : {std::size_t{512}, std::size_t{1} << 20, std::size_t{64} << 20}) {
      void* b = p.allocate(bytes);
      check(b != nullptr, "allocate returns memory");
      blocks.push_back(b);
    }
    const gpumem::pool_stats held = p.stats();
    check(held.allocations == 3, "3 allocations counted");
    check(held.live_bytes == 512 + (std::size_t{1} << 20) + (std::size_t{64} << 20), "live bytes");
    check(held.reserved_bytes >= held.live_bytes, "reserved covers live");
    check(dev.used_bytes() > 0, "the simulated device handed out memory");
    p.deallocate(blocks[0], 512);
    p.deallocate(blocks[1], std::size_t{1} << 20);
    p.deallocate(blocks[2], std::size_t{64} << 20);
    const gpumem::pool_stats freed = p.stats();
    check(freed.deallocations == 3, "3 deallocations counted");
    check(freed.live_bytes == 0, "nothing live after the frees");
    check(freed.peak_live_bytes == held.live_bytes, "peak live is what was held");
  }
#if CONSUMER_ANALYSIS
  std::istringstream csv(
      "Thread,Time,Action,Pointer,Size,Stream\n"
      "1,00:00:00.000001,allocate,0x1000,256,0x0\n"
      "1,00:00:00.000002,free,0x1000,256,0x0\n");
  const gpumem::trace t = gpumem::parse_trace(csv, "consumer.csv");
  check(t.records.size() == 2, "the trace's 2 records read");
#endif
  if (failures) return 1;
  std::puts("package consumer ok");
  return 0;
}
