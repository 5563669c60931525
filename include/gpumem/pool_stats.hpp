#pragma once
#include <cstddef>
#include <cstdint>

namespace gpumem {

// A snapshot of a pool's figures. Bytes unless named otherwise.
struct pool_stats {
  std::size_t live_bytes = 0;          // requested bytes callers hold
  std::size_t peak_live_bytes = 0;
  std::size_t reserved_bytes = 0;      // from the upstream: mapped + spare granules, or segments
  std::size_t peak_reserved_bytes = 0;
  std::size_t cached_bytes = 0;        // reserved - live - rounding held in live blocks
  std::size_t largest_free_block_bytes = 0;  // largest mapped free block in the arena
  std::uint64_t allocations = 0;       // successful allocate calls
  std::uint64_t deallocations = 0;
  std::uint64_t failed_allocations = 0;
  std::uint64_t upstream_calls = 0;    // segments/physical granules created
  std::uint64_t upstream_releases = 0;
  std::uint64_t maps = 0;              // granules mapped (virtual upstreams)
  std::uint64_t unmaps = 0;
  // Upstream map / unmap calls (virtual upstreams): each maps or unmaps a contiguous run of
  // granules. On the GPU a map call is one cuMemMap per granule plus one cuMemSetAccess, an unmap
  // call one cuMemUnmap.
  std::uint64_t map_calls = 0;
  std::uint64_t unmap_calls = 0;
  std::uint64_t events_recorded = 0;
  // The policy's remap time budget (detail::pool_tuning; zeros without it): host time charged for
  // moving granules, in ns, and the moves the budget turned down (the request grew instead).
  std::uint64_t remap_ns = 0;
  std::uint64_t remaps_deferred = 0;
  // Stream-ordered moves (detail::pool_tuning): granules mapped under a request on the stream that had
  // freed them while its work was still queued (part of `maps`).
  std::uint64_t stream_ordered_moves = 0;
  // Granules the driver really mapped and unmapped (virtual upstreams). `maps` and `unmaps` count
  // the pool's moves; a granule moved away from a place stays mapped there (a kept mapping) until
  // the place is needed by another handle, and moving it back there costs no driver call at all.
  // `kept_mappings`: granules kept mapped that way now (address space only: their memory is
  // counted once, where it is mapped or spare).
  std::uint64_t driver_maps = 0;
  std::uint64_t driver_unmaps = 0;
  std::size_t kept_mappings = 0;
  std::uint64_t front_hits = 0;        // requests served by a front cache without the arena
  // Of which small requests whose bin had run dry: filled from the stream's slabs under the
  // stream's shard lock (not the pool's). Far fewer than front_hits when the bins keep what a job
  // frees; near them when the bins give back what comes in (a budget spent elsewhere).
  std::uint64_t front_refills = 0;
  // Cached large blocks a front cache gave back to make room for one freed later (the oldest go
  // first: the shapes a job frees now are those it asks for next).
  std::uint64_t front_evictions = 0;
  // The step plan: large requests placed by a layout learned from an earlier step of the job (part
  // of front_hits: no arena, no pool lock), and the layouts the pool has taken up.
  std::uint64_t plan_hits = 0;
  std::uint64_t plans = 0;
  double fragmentation() const noexcept {
    return peak_live_bytes ? double(peak_reserved_bytes) / double(peak_live_bytes) : 0.0;
  }
};

}  // namespace gpumem
