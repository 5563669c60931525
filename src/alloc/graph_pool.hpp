#pragma once
// The pool's graph pools (gpumem/graph_pool.hpp): which streams capture into which pool, and each
// pool's memory. Not thread-safe: the pool calls it under its lock. Memory comes from the upstream
// directly (never the arena), so the arena's policy and invariants do not see it.
#include <cstddef>
#include <cstdint>
#include <map>
#include <set>
#include <unordered_map>
#include <vector>

#include "gpumem/core.hpp"
#include "gpumem/graph_pool.hpp"
#include "gpumem/upstream.hpp"

namespace gpumem::detail {

// A free the capturing stream made of a block from outside its capture: done at end_capture.
struct deferred_free {
  void* ptr;
  std::size_t bytes;
  std::size_t alignment;
};

class graph_pools {
 public:
  graph_pools(upstream& up, ordering& ord);
  ~graph_pools();  // the pool is going: everything back to the upstream, live or not
  graph_pools(const graph_pools&) = delete;
  graph_pools& operator=(const graph_pools&) = delete;

  graph_pool_id create();
  void begin(stream_ref s, graph_pool_id g);
  // Ends `s`'s capture; returns the frees deferred on it.
  std::vector<deferred_free> end(stream_ref s);
  graph_pool_id capturing(stream_ref s) const {
    auto it = capture_.find(s);
    return it == capture_.end() ? 0 : it->second;
  }
  void defer(stream_ref s, const deferred_free& d) { deferred_[s].push_back(d); }

  // A block of graph pool `g` for `bytes` at `alignment` (at most the granule). `room`: the most
  // reserved bytes it may add (max_reserved_bytes). Throws out_of_memory.
  std::uintptr_t allocate(graph_pool_id g, std::size_t bytes, std::size_t alignment, std::size_t room);
  enum class freed { not_ours, done, size_mismatch };
  // The free of `a` (`bytes` as asked) on `s`. size_mismatch sets `expected`; the block stays live.
  freed deallocate(std::uintptr_t a, std::size_t bytes, stream_ref s, std::size_t& expected);
  bool owns(std::uintptr_t a) const { return live_.count(a) != 0; }

  void release(graph_pool_id g, stream_ref s);
  graph_pool_stats stats(graph_pool_id g) const;
  std::size_t reserved_bytes() const noexcept { return reserved_; }
  std::size_t capturing_streams() const noexcept { return capture_.size(); }

 private:
  struct chunk {  // small tier: best fit inside
    std::size_t bytes;
    std::size_t live = 0;
    physical_handle h{};  // virtual upstream: the chunk's one handle
  };
  // Large tier (virtual upstream): whole granules at an address of their own. A freed block's
  // mapping is dormant: its handles stay with it, so a later block of its size takes it whole (same
  // address, no driver call); a block of another size takes its handles (the mapping is then dead:
  // kept only for the graph's earlier kernels).
  enum class mstate : std::uint8_t { live, dormant, dead };
  struct mapping {
    std::vector<physical_handle> handles;
    mstate st = mstate::live;
  };
  struct live_block {
    graph_pool_id g;
    std::size_t bytes;        // as asked
    std::size_t block_bytes;  // as carved
    std::uintptr_t chunk;     // small tier: its chunk's base; large tier: 0
  };
  struct gpool {
    std::map<std::uintptr_t, chunk> chunks;
    std::map<std::uintptr_t, std::size_t> free_by_addr;
    std::set<std::pair<std::size_t, std::uintptr_t>> free_by_size;
    std::map<std::uintptr_t, mapping> maps;  // every mapping of the large tier, old places too
    std::vector<physical_handle> spare;      // large tier: handles no mapping holds
    std::size_t handles = 0;                 // large tier: handles held (spare, dormant or live)
    std::vector<std::pair<std::uintptr_t, std::size_t>> ranges;  // address ranges reserved
    std::uintptr_t va_next = 0, va_end = 0;
    std::size_t reserved = 0, peak_reserved = 0, live = 0, peak_live = 0, blocks = 0;
    std::uint32_t capturing = 0;
    bool released = false;
  };

  gpool& find(graph_pool_id g, const char* what);
  std::uintptr_t take_va(gpool& p, std::size_t bytes);
  std::uintptr_t carve_small(gpool& p, std::size_t block, std::size_t alignment);
  std::uintptr_t new_chunk(gpool& p, std::size_t bytes, std::size_t room);
  std::uintptr_t map_large(gpool& p, std::size_t granules, std::size_t room);
  void add_free(gpool& p, std::uintptr_t a, std::size_t n);
  void remove_free(gpool& p, std::uintptr_t a, std::size_t n);
  void wait_for(stream_ref s);
  // Released pool `p`: what no live block holds goes back to the upstream; the pool is forgotten
  // once it holds nothing.
  void give_back_unused(graph_pool_id g, gpool& p);
  void add_reserved(gpool& p, std::ptrdiff_t delta);
  [[noreturn]] void throw_oom(const gpool& p, std::size_t bytes, std::size_t alignment, std::string why) const;

  upstream& up_;
  ordering& ord_;
  const std::size_t granule_;
  const bool virt_;
  graph_pool_id next_id_ = 1;
  std::size_t reserved_ = 0;
  std::unordered_map<graph_pool_id, gpool> pools_;
  std::unordered_map<std::uintptr_t, live_block> live_;
  std::unordered_map<stream_ref, graph_pool_id> capture_;
  std::unordered_map<stream_ref, std::vector<deferred_free>> deferred_;
};

}  // namespace gpumem::detail
