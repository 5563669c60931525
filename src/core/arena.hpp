#pragma once
// The arena: a best-fit index over the blocks of the pool's address ranges. Splits, coalesces with
// both neighbours, grows, and — on a virtual upstream — maps, harvests and releases granules.
// Not thread-safe: the pool calls it under its lock.
//
// Free blocks are either stream-owned (freed on S: reusable by S at once, by others only after the
// stream clock says S has run past the free) or ready (reusable by all). Neighbours coalesce only
// when both are ready or both are owned by the same stream, so a merge never makes memory usable
// earlier than each part allowed.
//
// Physical memory on a virtual upstream: a granule must be mapped while any non-ready block (live,
// stream-owned, waiting) overlaps it — `busy_` counts those bytes per granule. A mapped granule
// with no busy byte is *idle*: ready free memory no stream can touch. When a request needs new
// granules, the arena takes spares, then harvests idle granules (unmap, map again where needed:
// same physical memory, no copy), and only then asks the upstream for more. Reserved memory is
// therefore what is mapped or spare — not the height of the address range — and holes of the
// wrong size in the range cost address space, not memory.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/stream_clock.hpp"
#include "gpumem/pool.hpp"
#include "gpumem/upstream.hpp"

namespace gpumem::detail {

struct arena_options {
  std::size_t min_segment_bytes = std::size_t{2} << 20;
  std::size_t max_reserved_bytes = SIZE_MAX;
  std::size_t address_range_bytes = 0;
  std::size_t release_threshold_bytes = SIZE_MAX;
};

class arena {
 public:
  static constexpr std::size_t unit = default_alignment;  // every block is a multiple of this

  arena(upstream& up, stream_clock& clock, arena_options opts);
  ~arena();
  arena(const arena&) = delete;
  arena& operator=(const arena&) = delete;

  // A block of `size` bytes (a multiple of `unit`) at an address aligned to `alignment` for stream
  // `s`; 0 when it cannot be had without new upstream memory and `may_grow` is false, or not at
  // all (upstream refused, limit reached). `why` then says which.
  std::uintptr_t allocate(std::size_t size, std::size_t alignment, stream_ref s, bool may_grow,
                          std::string* why = nullptr);
  // The block at `addr` is unused after the work on `s` enqueued so far; also after the work on
  // each of `also_on` (record_use) when given. False if `addr` is not a live block.
  bool deallocate(std::uintptr_t addr, stream_ref s, const std::vector<stream_ref>& also_on = {});
  // The size of the live block at `addr`, 0 if there is none.
  std::size_t live_size(std::uintptr_t addr) const;
  // True if a free (cached) block starts at `addr`: a pointer freed already.
  bool is_free_block_start(std::uintptr_t addr) const;

  // After the stream clock moved: stream-owned and waiting blocks whose frees are done turn ready.
  void promote();
  // Gives idle granules, spares and whole free segments back to the upstream until at most
  // `keep_cached` bytes of cached memory remain (0: everything).
  void release(std::size_t keep_cached);

  std::size_t reserved_bytes() const noexcept;
  std::size_t allocated_bytes() const noexcept { return allocated_; }
  std::size_t largest_free_block() const;
  std::vector<oom_report::stream_cache> owned_free_per_stream() const;
  void append_blocks(std::vector<block_info>& out) const;
  void check() const;  // throws std::logic_error on a broken invariant

  std::uint64_t upstream_calls() const noexcept { return upstream_calls_; }
  std::uint64_t upstream_releases() const noexcept { return upstream_releases_; }
  std::uint64_t maps() const noexcept { return maps_; }
  std::uint64_t unmaps() const noexcept { return unmaps_; }
  bool is_virtual() const noexcept { return virtual_; }

 private:
  enum class state : std::uint8_t { live, owned, ready, waiting };
  struct block {
    std::size_t size;
    std::uint32_t segment;
    state st;
    stream_ref stream;           // live: allocating stream; owned: owner
    std::uint64_t seq;           // owned: the free's sequence on `stream`
    std::vector<stream_mark> waits;  // waiting: all must be met
  };
  using block_map = std::map<std::uintptr_t, block>;
  using free_index = std::set<std::pair<std::size_t, std::uintptr_t>>;
  struct segment { std::uintptr_t base; std::size_t size; bool alive; };

  free_index& index_of(const block& b);
  void index_insert(block_map::iterator it);
  void index_erase(block_map::iterator it);
  block_map::iterator coalesce(block_map::iterator it);
  block_map::iterator find_fit(free_index& idx, std::size_t size, std::size_t alignment);
  bool grow_segment(std::size_t size, std::string* why);
  // Virtual upstreams: make every granule under [a, a+n) mapped; false if memory could not be had.
  bool ensure_mapped(std::uintptr_t a, std::size_t n, bool may_grow, std::string* why);
  bool take_physical(std::size_t count, bool may_grow, std::vector<physical_handle>& got, std::string* why);
  void add_busy(std::uintptr_t a, std::size_t n, bool add);
  std::size_t unmapped_granules(std::uintptr_t a, std::size_t n) const;
  void choose_placement(block_map::iterator& it, std::uintptr_t& start, std::size_t size, std::size_t alignment);
  void harvest_one(std::size_t granule, std::vector<physical_handle>& into);
  void make_free(block_map::iterator it);  // a block entering owned/ready: index + coalesce

  upstream& up_;
  stream_clock& clock_;
  arena_options opts_;
  bool virtual_;
  std::size_t granule_;
  block_map blocks_;
  free_index ready_;
  std::unordered_map<stream_ref, free_index> owned_;
  std::vector<std::uintptr_t> waiting_;  // addresses of waiting blocks
  std::vector<segment> segments_;
  std::size_t segment_bytes_ = 0;        // plain: sum of live segments
  std::size_t allocated_ = 0;            // bytes in live blocks

  // virtual upstream state
  std::uintptr_t range_base_ = 0;
  std::size_t range_bytes_ = 0;
  std::vector<physical_handle> granule_handle_;   // value 0: unmapped
  std::vector<std::uint32_t> busy_;               // non-ready bytes overlapping each granule
  std::set<std::size_t> idle_;                    // mapped granules with no busy byte
  std::vector<physical_handle> spares_;
  std::size_t mapped_ = 0;                        // granules mapped
  std::size_t high_water_ = 0;                    // end of the highest block ever live, relative

  std::uint64_t upstream_calls_ = 0, upstream_releases_ = 0, maps_ = 0, unmaps_ = 0;
};

}  // namespace gpumem::detail
