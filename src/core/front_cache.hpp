#pragma once
// The front cache: per-thread, per-stream bins of freed blocks, and the thread's table of the
// allocations it handed out. The common allocate/free touches only the calling thread's front
// cache, whose lock no other thread takes in the common case: no shared cache line, so threads
// scale.
//
// Why it stays correct with streams: a block enters the bin of the stream it was freed on, and a
// bin serves only requests on that same stream. Work on one stream runs in order, so the new
// owner's work cannot start before the old owner's work on that stream has finished. A block never
// leaves a bin for another stream: when the pool flushes a front cache (pressure, trim), each block
// goes back to the slab cache or arena as freed on its bin's stream, and from there the stream
// clock's events decide when other streams may have it.
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/front_lock.hpp"
#include "core/pointer_map.hpp"
#include "core/size_class.hpp"
#include "gpumem/core.hpp"

namespace gpumem::detail {

struct slab;

// What the pool knows of one live allocation.
struct live_entry {
  std::size_t bytes = 0;        // as requested
  std::size_t block_bytes = 0;  // what the block really is: a slot's size or an arena block's
  std::uint32_t alignment = 0;  // as requested (at least 256)
  bool used_elsewhere = false;  // record_use named another stream: never cached in a bin
  stream_ref stream = 0;        // the allocating stream
  slab* sl = nullptr;           // the slot's slab; nullptr: an arena block of align_up(bytes, 256)
};

struct cached_block {
  std::uintptr_t addr;
  std::size_t size;  // arena size (multiple of 256) or slot size
  slab* sl;
};

// Bins of one stream in one front cache.
struct stream_bins {
  stream_ref stream = 0;
  std::size_t cached_bytes = 0;
  std::vector<std::vector<cached_block>> bins;  // by size class (small and large share the index)
};

// Classes for bins of large blocks: 8 per doubling above the small ones, up to 2^47 bytes.
inline std::size_t bin_of(std::size_t size) noexcept { return size_class_of(size); }

class front_cache {
 public:
  front_lock lock;  // see front_lock.hpp: cheap for the owning thread
  pointer_map<live_entry> live;
  std::vector<stream_bins> streams;
  std::size_t live_bytes = 0;      // exact, under `lock`
  std::ptrdiff_t unpublished = 0;  // live bytes not yet added to the pool's shared counter
  std::size_t peak_live = 0;       // this front's own peak: the pool's, while it is the only one
  std::uint64_t hits = 0, fast_frees = 0;  // served / taken back without the pool's lock

  stream_bins& bins_for(stream_ref s) {
    if (last_ < streams.size() && streams[last_].stream == s) return streams[last_];
    for (std::size_t i = 0; i < streams.size(); ++i)
      if (streams[i].stream == s) return streams[last_ = i];
    streams.push_back(stream_bins{s, 0, {}});
    last_ = streams.size() - 1;
    return streams.back();
  }
  // Pops a cached block of exactly `size` bytes (and `alignment`) for stream `s`; 0 if none.
  cached_block pop(stream_ref s, std::size_t size, std::size_t alignment) {
    stream_bins& sb = bins_for(s);
    const std::size_t b = bin_of(size);
    if (b >= sb.bins.size()) return {0, 0, nullptr};
    auto& bin = sb.bins[b];
    // Newest first (warm in cache, likeliest the same size); a few probes at most.
    for (std::size_t k = 0; k < bin.size() && k < 4; ++k) {
      cached_block& c = bin[bin.size() - 1 - k];
      if (c.size == size && c.addr % alignment == 0) {
        cached_block out = c;
        c = bin.back();
        bin.pop_back();
        sb.cached_bytes -= out.size;
        return out;
      }
    }
    return {0, 0, nullptr};
  }
  // Caches a freed block for stream `s` unless that would pass the limits; false: not cached.
  bool push(stream_ref s, const cached_block& c, std::size_t max_bytes, std::size_t max_per_bin) {
    stream_bins& sb = bins_for(s);
    // One block of any size is always welcome, so a loop over one big tensor stays fast; past
    // that the byte budget holds.
    if (sb.cached_bytes != 0 && sb.cached_bytes + c.size > max_bytes) return false;
    const std::size_t b = bin_of(c.size);
    if (b >= sb.bins.size()) sb.bins.resize(b + 1);
    auto& bin = sb.bins[b];
    if (bin.size() >= max_per_bin) return false;
    bin.push_back(c);
    sb.cached_bytes += c.size;
    return true;
  }

 private:
  std::size_t last_ = 0;
};

}  // namespace gpumem::detail
