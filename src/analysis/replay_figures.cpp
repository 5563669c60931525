// The figures `gpumem replay --json` prints and the report's page shows, from one replay_result.
#include "gpumem/replay_figures.hpp"

namespace gpumem {

bool replay_is_pool(const replay_result& r) noexcept {
  return r.resource.rfind("pool", 0) == 0 || r.resource.rfind("gpu-pool", 0) == 0;
}

std::vector<replay_figure> replay_figures(const replay_result& r) {
  auto n = [](const char* key, double v) { return replay_figure{key, v, true}; };
  auto x = [](const char* key, double v) { return replay_figure{key, v, false}; };
  std::vector<replay_figure> out{n("ops", double(r.ops)),
                                 n("peak_live_bytes", double(r.peak_live_bytes)),
                                 n("peak_reserved_bytes", double(r.peak_reserved_bytes)),
                                 n("final_reserved_bytes", double(r.final_reserved_bytes)),
                                 x("fragmentation", r.fragmentation),
                                 x("ns_per_op", r.ns_per_op),  // host time of the passes / ops
                                 n("failed_allocs", double(r.failed_allocs)),
                                 n("trace_failures", double(r.trace_failures))};
  if (!replay_is_pool(r)) return out;
  const pool_stats& s = r.stats;
  out.insert(out.end(),
             {n("upstream_calls", double(s.upstream_calls)), n("maps", double(s.maps)), n("unmaps", double(s.unmaps)),
              n("events_recorded", double(s.events_recorded)), n("map_calls", double(s.map_calls)),
              n("unmap_calls", double(s.unmap_calls)),
              x("map_unmap_calls_per_1000_ops", r.per_1000_ops(s.map_calls + s.unmap_calls)),
              x("granules_mapped_unmapped_per_1000_ops", r.per_1000_ops(s.maps + s.unmaps)),
              // Allocations the calling thread's front cache served without the pool's lock: the fast path.
              n("allocations", double(s.allocations)), n("front_hits", double(s.front_hits)),
              n("front_refills", double(s.front_refills)),      // of which from the stream's slabs
              n("front_evictions", double(s.front_evictions)),  // cached large blocks that made room
              // The step plan: large requests placed by a layout learned from an earlier step.
              n("plan_hits", double(s.plan_hits)), n("plans", double(s.plans)),
              // remap_time_budget: host time charged for moves, and the moves the budget turned down.
              x("remap_ms", double(s.remap_ns) / 1e6), n("remaps_deferred", double(s.remaps_deferred)),
              n("stream_ordered_moves", double(s.stream_ordered_moves)),
              // Kept mappings: what the driver really did (moves back where a granule was still
              // mapped cost no call).
              x("driver_granules_per_1000_ops", r.per_1000_ops(s.driver_maps + s.driver_unmaps)),
              n("driver_maps", double(s.driver_maps)), n("driver_unmaps", double(s.driver_unmaps))});
  return out;
}

}  // namespace gpumem
