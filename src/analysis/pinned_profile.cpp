// The live-byte arithmetic (peak, duration) is the device profile's; this adds what only the pinned
// finding needs: the largest request and the re-pins.
#include "pinned_profile.hpp"

#include <algorithm>
#include <unordered_map>

#include "trace_profile.hpp"

namespace gpumem::detail {

pinned_profile profile_pinned(const trace& t) {
  // No size is "small" (0) and every size is "aligned" (1): only the live-set figures are used.
  const trace_profile base = profile_trace(t, 0, 1, 0);
  pinned_profile p;
  p.rows = base.rows;
  p.allocations = base.allocations;
  p.failures = base.failures;
  p.peak_bytes = base.peak_live_bytes;
  p.peak_line = base.peak_line;
  p.timed = base.timed;
  p.duration_seconds = base.duration_seconds;

  // The size a block was allocated with counts, not the one its free row states.
  std::unordered_map<std::uint64_t, std::uint64_t> live;           // pointer -> size
  std::unordered_map<std::uint64_t, std::uint64_t> freed_by_size;  // size -> frees not yet re-pinned
  for (const auto& r : t.records) {
    if (r.action == trace_action::allocate) {
      p.largest_allocation_bytes = std::max(p.largest_allocation_bytes, r.size);
      auto it = freed_by_size.find(r.size);
      if (it != freed_by_size.end() && it->second > 0) {
        --it->second;
        ++p.repinned_allocations;
      }
      if (r.pointer != 0) live[r.pointer] = r.size;
    } else if (r.action == trace_action::free) {
      auto it = live.find(r.pointer);
      if (it == live.end()) continue;  // a null free; read_trace rejects any other unknown pointer
      ++freed_by_size[it->second];
      live.erase(it);
    }
  }
  return p;
}

}  // namespace gpumem::detail
