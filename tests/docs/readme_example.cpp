// The README's first C++ example, compiled and run as it stands there: the lines between the
// markers must be the README's first ```cpp block, line for line (test_readme.py checks).
#include <cstdio>

// README begin
#include "gpumem/pool.hpp"
#include "gpumem/sim_device.hpp"
// README end

int main() {
  // README begin
  gpumem::sim_device dev;                                  // 80 GiB, virtual memory, never backed
  gpumem::pool_options po;                                 // a struct: see docs/options.md
  po.max_reserved_bytes = std::size_t{8} << 30;            // share the device: never hold more than 8 GiB
  gpumem::pool p(dev.memory(), dev.streams(), po);
  gpumem::stream_ref s = dev.create_stream();
  void* x = p.allocate(3 << 20, gpumem::default_alignment, s);
  p.deallocate(x, 3 << 20, gpumem::default_alignment, s);  // reusable on s at once, elsewhere once s has run past it
  gpumem::pool_stats st = p.stats();                       // live, reserved, peaks, cached, largest free block, ...
  p.settle();                                              // where a step ends: caches back to the pool, nothing to the device
  p.trim();                                                // give back everything cached
  // README end
  p.check_invariants();
  if (x == nullptr || st.live_bytes != 0 || st.peak_live_bytes != std::size_t{3} << 20) {
    std::printf("README example: unexpected figures (live %zu, peak live %zu)\n", st.live_bytes, st.peak_live_bytes);
    return 1;
  }
  std::printf("README example: ran, peak live %zu B, peak reserved %zu B\n", st.peak_live_bytes, st.peak_reserved_bytes);
  return 0;
}
