#pragma once
// Graph pools: memory for CUDA graph capture, as PyTorch's private pools (graph_pool_handle,
// beginAllocateToPool / endAllocateToPool / releasePool).
//
// A graph captured on a stream keeps the addresses its kernels were captured with: every replay
// touches the same memory. So while stream S captures into graph pool G (pool::begin_capture):
//  - S's allocations come from memory that belongs to G alone: never the front caches, the
//    arena, or memory another stream freed;
//  - S's frees of G's blocks go back to G and are reused by G's later allocations at once: within
//    a capture, graph order is capture order, so no event is needed (and none is recorded on S);
//  - S's frees of other blocks (allocated outside the capture) wait until end_capture, when S
//    records events again. The graph still uses such a block on every replay: keep it alive while
//    the graph exists (gpumem doctor flags the free);
//  - G's memory stays reserved while G exists (the graph's replays use it); several captures may
//    share G (their graphs must then replay in capture order, as with PyTorch's shared pools), and
//    a block of G freed outside a capture is reused by G's next capture.
// release_graph_pool gives G's memory back: free memory at once (after the release stream's work),
// live blocks once they are freed.
//
// G takes memory from the pool's upstream itself, not from the arena, so pool::stats() does not
// count it (graph_stats does; max_reserved_bytes bounds both together). On a virtual upstream a
// block of a granule or more gets whole granules mapped at an address of its own, and a freed
// block's granules are mapped again under G's later blocks (the old mapping stays until release:
// earlier kernels of the graph still use it, and they run before the later ones), so G holds
// about the capture's peak of physical memory. Smaller blocks, and every block on a plain
// upstream, are carved best-fit from granule-sized chunks.
#include <cstddef>
#include <cstdint>

namespace gpumem {

// A graph pool's name; 0 is none. Made by pool::create_graph_pool, shared by the captures that
// pass it to begin_capture.
using graph_pool_id = std::uint64_t;

struct graph_pool_stats {
  std::size_t reserved_bytes = 0;       // physical memory G holds from the upstream now
  std::size_t peak_reserved_bytes = 0;
  std::size_t live_bytes = 0;           // bytes asked by G's blocks not yet freed
  std::size_t peak_live_bytes = 0;      // the most live at once: the capture's peak
  std::size_t blocks = 0;               // live blocks
  std::size_t mappings = 0;             // virtual upstream: mappings G made (aliases included)
  std::uint32_t capturing_streams = 0;  // streams capturing into G now
  bool released = false;
};

}  // namespace gpumem
