#include "arena.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <stdexcept>

namespace gpumem::detail {
namespace {
constexpr std::size_t kTerabyte = std::size_t{1} << 40;
void set_why(std::string* why, std::string text) {
  if (why) *why = std::move(text);
}
}  // namespace

arena::arena(upstream& up, stream_clock& clock, arena_options opts)
    : up_(up), clock_(clock), opts_(opts), virtual_(up.supports_virtual()), granule_(up.granularity()),
      granule_log2_(std::countr_zero(granule_)) {
  if (!is_power_of_two(granule_) || granule_ < unit)
    throw std::invalid_argument(fmt::format("arena: upstream granularity {} is not a power of two >= {}", granule_, unit));
  if (!virtual_) return;
  std::size_t range = opts_.address_range_bytes;
  if (range == 0) range = up_.capacity_bytes() ? 4 * up_.capacity_bytes() : kTerabyte;
  range_bytes_ = align_up(range, granule_);
  range_base_ = reinterpret_cast<std::uintptr_t>(up_.reserve_range(range_bytes_));
  segments_.push_back({range_base_, range_bytes_, true});
  const std::size_t granules = range_bytes_ / granule_;
  granule_handle_.assign(granules, physical_handle{0});
  mapped_bits_.assign(granules);
  idle_.assign(granules);
  handle_head_.assign(granules, 0);
  handle_granules_.assign(granules, 0);
  max_handle_granules_ = std::max<std::size_t>(1, opts_.max_handle_bytes / granule_);
  busy_.assign(granules, 0);
  kept_.assign(granules, physical_handle{0});
  remap_refilled_at_ = now_ns();
  // The whole range starts as one unmapped ready block: one run.
  auto it = emplace_block(range_base_, block{range_bytes_, 0, state::ready, false, 0, 0, {}});
  index_insert(it);
  run_add(range_base_, range_bytes_);
}

arena::~arena() {
  if (virtual_) {
    // Kept mappings first: their handles are released below, where they are mapped or spare.
    for (std::size_t g = 0; g < kept_end_; ++g) drop_kept(g);
    // Retiring places next: they own no handle, so the loop below, which releases each mapped
    // handle once, must not see them.
    for (std::uintptr_t a : retiring_) {
      const std::size_t g0 = granule_of(a), g1 = granule_of(a + blocks_.at(a).size);
      up_.unmap(reinterpret_cast<void*>(a), (g1 - g0) * granule_);
      for (std::size_t g = g0; g < g1; ++g) {
        granule_handle_[g] = physical_handle{0};
        mapped_bits_.clear(g);
      }
    }
    for (std::size_t g = 0; g < granule_handle_.size();) {
      if (granule_handle_[g].value == 0) {
        ++g;
        continue;
      }
      std::size_t e = g;
      while (e < granule_handle_.size() && granule_handle_[e].value) ++e;
      up_.unmap(reinterpret_cast<void*>(granule_addr(g)), (e - g) * granule_);  // one call per run
      for (; g < e; g += handle_granules_[g]) up_.release_physical(granule_handle_[g], handle_granules_[g] * granule_);
    }
    for (auto p : spares_) up_.release_physical(p.h, p.granules * granule_);
    up_.release_range(reinterpret_cast<void*>(range_base_), range_bytes_);
  } else {
    for (auto& s : segments_)
      if (s.alive) up_.free_segment(reinterpret_cast<void*>(s.base), s.size);
  }
}

arena::owned_blocks& arena::owned_of(stream_ref s) {
  // The last stream's, remembered: a free and the coalescing after it ask for the same stream's
  // several times, and an unordered_map's values stay where they are until erased.
  if (owned_last_ && owned_last_stream_ == s) return *owned_last_;
  owned_last_stream_ = s;
  return *(owned_last_ = &owned_.try_emplace(s, nodes_).first->second);
}
arena::free_index& arena::index_of(const block& b) {
  if (b.st == state::ready) return ready_;
  return owned_of(b.stream).by_size;
}
void arena::index_insert(block_map::iterator it) {
  block& b = it->second;
  if (!virtual_) {
    index_of(b).emplace(b.size, it->first);
  } else if (b.st == state::ready) {
    (b.mapped ? ready_list_ : void_list_).push(&*it);
  } else {
    owned_of(b.stream).list.push(&*it);
  }
}
void arena::index_erase(block_map::iterator it) {
  block& b = it->second;
  if (b.st == state::ready) {
    if (!virtual_) ready_.erase({b.size, it->first});
    else (b.mapped ? ready_list_ : void_list_).unlink(&*it);
    return;
  }
  owned_blocks& o = owned_of(b.stream);
  if (!virtual_) o.by_size.erase({b.size, it->first});
  else o.list.unlink(&*it);
  if (o.empty()) {
    owned_last_ = nullptr;
    owned_.erase(b.stream);
  }
}

// Merges a free block (not in an index) with free neighbours of the same kind; returns the merged
// block, still not in an index.
arena::block_map::iterator arena::coalesce(block_map::iterator it) {
  auto same_kind = [&](const block& a, const block& b) {
    if (a.segment != b.segment || a.st != b.st) return false;
    return (a.st == state::ready && a.mapped == b.mapped) || (a.st == state::owned && a.stream == b.stream);
  };
  if (it != blocks_.begin()) {
    auto prev = std::prev(it);
    if (same_kind(prev->second, it->second)) {
      index_erase(prev);
      prev->second.size += it->second.size;
      prev->second.seq = std::max(prev->second.seq, it->second.seq);
      erase_block(it);
      it = prev;
    }
  }
  auto next = std::next(it);
  if (next != blocks_.end() && same_kind(it->second, next->second)) {
    index_erase(next);
    it->second.size += next->second.size;
    it->second.seq = std::max(it->second.seq, next->second.seq);
    erase_block(next);
  }
  return it;
}

void arena::make_free(block_map::iterator it) { index_insert(coalesce(it)); }

arena::block_map::iterator arena::find_fit(free_index& idx, std::size_t size, std::size_t alignment) {
  auto c = idx.lower_bound({size, 0});
  if (alignment <= unit) return c == idx.end() ? blocks_.end() : find_block(c->second);
  // Best fit that can also place an aligned start: look at a few candidates in size order, then
  // fall back to one big enough for any placement.
  for (int tries = 0; c != idx.end() && tries < 32; ++c, ++tries) {
    std::size_t pad = align_up(c->second, alignment) - c->second;
    if (c->first >= size + pad) return find_block(c->second);
  }
  c = idx.lower_bound({size + alignment - unit, 0});
  return c == idx.end() ? blocks_.end() : find_block(c->second);
}

bool arena::grow_segment(std::size_t size, std::string* why) {
  // Small requests share 2 MiB segments, mid-size ones 20 MiB, large ones get their own: the
  // shapes PyTorch's allocator settled on, so small blocks don't pin big segments.
  std::size_t seg = size <= (std::size_t{1} << 20)   ? opts_.min_segment_bytes
                    : size < (std::size_t{10} << 20) ? std::max<std::size_t>(std::size_t{20} << 20, opts_.min_segment_bytes)
                                                     : size;
  seg = align_up(std::max(seg, size), granule_);
  if (segment_bytes_ + seg > opts_.max_reserved_bytes) {
    seg = align_up(size, granule_);
    if (segment_bytes_ + seg > opts_.max_reserved_bytes) {
      set_why(why, "the pool's limit (max_reserved_bytes) would be passed");
      return false;
    }
  }
  void* p = up_.allocate_segment(seg);
  ++upstream_calls_;
  if (!p && seg > align_up(size, granule_)) {
    // The rounded-up segment is only a preference: when the upstream refuses it, the request
    // itself may still fit (a 6 MiB request asks for 20 MiB; on a nearly full device that must
    // not turn into an out-of-memory while 6 MiB are free).
    seg = align_up(size, granule_);
    p = up_.allocate_segment(seg);
    ++upstream_calls_;
  }
  if (!p) {
    set_why(why, fmt::format("upstream {} refused a segment of {} B", up_.name(), seg));
    return false;
  }
  auto base = reinterpret_cast<std::uintptr_t>(p);
  segments_.push_back({base, seg, true});
  segment_bytes_ += seg;
  auto it = emplace_block(base, block{seg, static_cast<std::uint32_t>(segments_.size() - 1), state::ready, true, 0, 0, {}});
  index_insert(it);
  return true;
}

bool arena::reserve_upfront(std::size_t bytes, std::string* why) {
  if (allocated_ || reserved_bytes())
    throw std::logic_error("arena::reserve_upfront: the arena already holds memory");
  if (bytes == 0) return true;
  if (!virtual_) return grow_segment(bytes, why);
  if (bytes > range_bytes_) {
    set_why(why, fmt::format("{} B is more than the reserved address range ({} B)", bytes, range_bytes_));
    return false;
  }
  // The whole range is one unmapped ready block: its bottom granules become mapped ready memory,
  // idle, as growth would leave them. (map_window gives back what it took if any piece fails.)
  return map_window(range_base_, align_up(bytes, granule_), 0, true, why);
}

std::uintptr_t arena::allocate(std::size_t size, std::size_t alignment, stream_ref s, bool may_grow, std::string* why,
                               bool may_map, bool slab) {
  if (!virtual_) return allocate_plain(size, alignment, s, may_grow, why);
  // arena_options::slab_zone: slabs from the upper half of the range, every other block from the
  // lower, for this request (`place` reads the zone; it is reset however this returns).
  struct zone_scope {
    arena& a;
    ~zone_scope() { a.zone_lo_ = 0, a.zone_hi_ = UINTPTR_MAX; }
  } zone{*this};
  if (opts_.slab_zone) {
    const std::uintptr_t mid = range_base_ + range_bytes_ / 2;
    zone_lo_ = slab ? mid : range_base_;
    zone_hi_ = slab ? range_base_ + range_bytes_ : mid;
  }
  // Best fit over the free runs this stream can use, by address alone — whether the memory under
  // them is mapped does not choose the run — then, among the few best-fitting runs, the place that
  // needs the fewest granules mapped. Placement that depends on the address layout only (and not
  // on which granules happen to be mapped, nor on when other frees' events completed) repeats
  // itself when the program does: a training loop's steps land where the last step's did, on
  // granules still mapped, and stop costing driver calls (design notes).
  std::uintptr_t start = 0;
  std::size_t cost = 0;
  auto place_any = [&] { return place(size, alignment, s, 4, start, cost) || place(size, alignment, s, SIZE_MAX, start, cost); };
  bool placed = place_any();
  if (!placed && opts_.slab_zone) {
    // Its half is full (a small address range): anywhere rather than fail.
    zone_lo_ = 0, zone_hi_ = UINTPTR_MAX;
    placed = place_any();
  }
  if (!placed) {
    set_why(why, "the reserved address range is exhausted");
    return 0;
  }
  // Before paying for mapping: memory other streams freed may have become free for all.
  if (cost > 0 && foreign_owned(s)) {
    clock_.cover_all();
    if (clock_.poll()) {
      promote();
      if (!place(size, alignment, s, 4, start, cost)) place(size, alignment, s, SIZE_MAX, start, cost);
    }
  }
  // With the remap time budget spent, any place on mapped memory beats the best fit: moving
  // granules under the best fit is what the budget forbids, and growing beneath it strands the
  // idle granules elsewhere (measured on bert's trace: 1.4-1.7x peak live with the best fit kept).
  if (cost > 0 && remap_budget_spent()) place(size, alignment, s, SIZE_MAX, start, cost);
  if (cost > 0 && !may_map) {
    set_why(why, "no mapped place fits");
    return 0;
  }
  // (A place on mapped memory, cost 0, has nothing to map.)
  const bool chunked = cost > 0 && slab && zone_lo_ > range_base_ && map_slab_chunk(start, size, s, may_grow, why);
  if (cost > 0 && !chunked && !map_window(start, size, s, may_grow, why)) {
    // When its granules cannot be had, the cheapest place anywhere may still fit (at the top of
    // the mapped range, where the last granule is partly mapped): try that once.
    std::uintptr_t other = 0;
    std::size_t other_cost = 0;
    if (!place(size, alignment, s, SIZE_MAX, other, other_cost) || other_cost >= cost ||
        !map_window(other, size, s, may_grow, why))
      return 0;
    start = other;
  }
  // On mapped memory nothing changed the blocks since `place` found the one that holds it.
  return carve_window(start, size, s, cost == 0 ? placed_in_ : blocks_.end());
}

// The slab zone grows a slab at a time, and each slab that needs a granule mapped would cost a
// driver call of its own (~45 µs on the H200 whatever the size): bert's first pass made 14 calls
// more with the zone than without, llama's 40. So the free granules of the request's aligned
// chunk of slab_chunk_granules (within its run and the zone) are mapped with it, in one call
// (growing first, a run of missing granules is one handle); the next slabs land there mapped.
bool arena::map_slab_chunk(std::uintptr_t start, std::size_t size, stream_ref s, bool may_grow, std::string* why) {
  const std::size_t chunk = slab_chunk_granules * granule_;
  auto run = std::prev(run_at_.upper_bound(start));  // the free run `place` chose
  const std::uintptr_t lo = std::max({range_base_ + (start - range_base_) / chunk * chunk, run->start, zone_lo_});
  const std::uintptr_t hi =
      std::min({range_base_ + align_up(start + size - range_base_, chunk), run->start + run->size, zone_hi_});
  if (lo == start && hi == start + size) return false;  // the chunk is the request: nothing to add
  std::string ignored;
  return map_window(lo, hi - lo, s, may_grow, why ? &ignored : nullptr, start, start + size);
}

bool arena::foreign_owned(stream_ref s) const {
  // Two streams or more own blocks: one of them is not `s`. No lookup by stream needed.
  if (owned_.size() != 1) return owned_.size() > 1;
  return owned_.begin()->first != s;
}

arena::block_map::iterator arena::split(block_map::iterator b, std::uintptr_t at) {
  const block& x = b->second;
  auto right = emplace_block_before(std::next(b), at, block{b->first + x.size - at, x.segment, x.st, x.mapped, x.stream, x.seq, {}});
  b->second.size = at - b->first;
  return right;
}

void arena::cut_at(std::uintptr_t x) {
  if (x >= range_base_ + range_bytes_) return;
  auto b = block_at(x);
  if (b->first == x) return;
  index_erase(b);
  auto right = split(b, x);
  index_insert(b);
  index_insert(right);
}

// Every granule under [start, start + size) is mapped and every block over it ready or owned by
// `s`: they become one live block; what they had outside the window stays free as it was.
std::uintptr_t arena::carve_window(std::uintptr_t start, std::size_t size, stream_ref s, block_map::iterator holder) {
  const std::uintptr_t end = start + size;
  auto it = holder != blocks_.end() ? holder : block_at(start);
  const std::uint32_t segment = it->second.segment;
  if (it->first < start) {
    index_erase(it);
    auto right = split(it, start);
    index_insert(it);
    it = right;
  } else {
    index_erase(it);
  }
  // `it` starts at `start` and is in no index. The first block's node becomes the live block (one
  // erase and one insert fewer in the largest tree); the others under the window go.
  const auto first = it;
  for (;;) {
    if (it->first + it->second.size > end) index_insert(split(it, end));
    if (it->second.st == state::ready) add_busy(it->first, it->second.size, true);
    const std::uintptr_t next_at = it->first + it->second.size;
    it = it == first ? std::next(it) : erase_block(it);
    if (next_at >= end) break;
    index_erase(it);
  }
  first->second = block{size, segment, state::live, true, s, 0, {}};
  run_remove(start, size);
  high_water_ = std::max(high_water_, end - range_base_);
  allocated_ += size;
  return start;
}

arena::block_map::iterator arena::best_fit(std::size_t size, std::size_t alignment, stream_ref s) {
  auto mine = owned_.find(s);
  auto a = mine == owned_.end() ? blocks_.end() : find_fit(mine->second.by_size, size, alignment);
  auto b = find_fit(ready_, size, alignment);
  if (b != blocks_.end() && (a == blocks_.end() || b->second.size < a->second.size)) return b;
  return a;
}

std::uintptr_t arena::allocate_plain(std::size_t size, std::size_t alignment, stream_ref s, bool may_grow,
                                     std::string* why) {
  bool covered = false, waited = false, released = false;
  for (;;) {
    if (auto it = best_fit(size, alignment, s); it != blocks_.end()) return carve(it, align_up(it->first, alignment), size, s);
    // Memory other streams freed may be ready by now; then grow; then wait.
    if (!covered) {
      covered = true;
      clock_.cover_all();
      if (clock_.poll()) promote();
      continue;
    }
    if (!may_grow) {
      set_why(why, "growth needed");
      return 0;
    }
    if (grow_segment(size + (alignment > unit ? alignment : 0), why)) continue;
    if (!waited) {
      waited = true;
      if (clock_.wait_all()) {
        promote();
        continue;
      }
    }
    if (!released) {
      released = true;
      std::size_t before = reserved_bytes();
      release(0);
      if (reserved_bytes() < before) continue;
    }
    return 0;
  }
}

std::uintptr_t arena::carve(block_map::iterator it, std::uintptr_t start, std::size_t size, stream_ref s) {
  const state was = it->second.st;
  const bool mapped = it->second.mapped;  // true: plain blocks are always backed
  const stream_ref owner = it->second.stream;
  const std::uint64_t seq = it->second.seq;
  const std::uint32_t segment = it->second.segment;
  index_erase(it);
  if (start != it->first) {
    std::size_t pad = start - it->first;
    std::size_t rest = it->second.size - pad;
    it->second.size = pad;
    index_insert(it);
    it = emplace_block_before(std::next(it), start, block{rest, segment, was, mapped, owner, seq, {}});
  }
  if (it->second.size > size) {
    auto tail = emplace_block_before(std::next(it), start + size, block{it->second.size - size, segment, was, mapped, owner, seq, {}});
    index_insert(tail);
    it->second.size = size;
  }
  it->second.st = state::live;
  it->second.stream = s;
  allocated_ += size;
  return start;
}

arena::block_map::iterator arena::block_at(std::uintptr_t a) {
  auto it = blocks_.upper_bound(a);
  return std::prev(it);
}

// Inlined into `place`, its one caller, which asks it for every candidate place.
[[gnu::always_inline]] inline std::size_t arena::unmapped_granules(std::uintptr_t a, std::size_t n, std::size_t enough) const {
  const std::size_t g0 = granule_of(a), g1 = (a + n - range_base_ + granule_ - 1) >> granule_log2_;
  return std::min(g1 - g0 - mapped_bits_.count(g0, g1), enough);
}

// Runs are best-fit by size; a run with blocks another stream owns splits into the stretches
// between them. Within a stretch the place that maps the fewest granules wins: against its start
// or end, or against a mapped block inside it (a block against a live neighbour shares that
// neighbour's partly used granule instead of starting a new one; one over idle granules maps none
// of them). Ties go to the best-fitting run and its lowest such place. `runs` bounds the runs
// that can hold the request looked at; SIZE_MAX looks at all, every block of them.
bool arena::place(std::size_t size, std::size_t alignment, stream_ref s, std::size_t runs, std::uintptr_t& start,
                  std::size_t& cost) {
  cost = SIZE_MAX;
  placed_in_ = blocks_.end();
  const std::uintptr_t mask = ~static_cast<std::uintptr_t>(alignment - 1);
  const bool all = runs == SIZE_MAX;
  // `first`: the block at `lo`. A place inside one mapped block (ready mapped, or owned: busy, so
  // mapped) needs no granule mapped, and its granules need no count: most requests that miss the
  // front caches land so (a training step's shapes come back where they were).
  auto consider = [&](std::uintptr_t lo, std::uintptr_t hi, block_map::iterator first) {
    if (hi - lo < size) return false;
    bool fits = false;
    auto try_at = [&](std::uintptr_t at, block_map::iterator in) {
      if (at < lo || at + size > hi) return;
      fits = true;
      const bool inside = in != blocks_.end() && in->second.mapped && in->first <= at &&
                          at + size <= in->first + in->second.size;
      const std::size_t c = inside ? 0 : unmapped_granules(at, size, cost);  // no better than `cost`: no need to finish
      if (c < cost) {
        cost = c;
        start = at;
        placed_in_ = inside ? in : blocks_.end();
      }
    };
    try_at(align_up(lo, alignment), first);
    if (cost) try_at((hi - size) & mask, blocks_.end());
    int k = 0;
    for (auto b = first; b != blocks_.end() && b->first < hi && (k < 16 || all) && cost; ++b, ++k) {
      if (!b->second.mapped) continue;
      try_at(align_up(b->first, alignment), b);
      const std::uintptr_t e = b->first + b->second.size;
      if (e - lo >= size) try_at((e - size) & mask, b);
    }
    return fits;
  };
  const bool foreign = foreign_owned(s);
  // The runs to look at: by size from the best fit (`runs` of them that can hold the request);
  // or, in the slab zone, by address from its bottom — slabs pack there, the lowest place that
  // maps the fewest granules winning (its runs are the few holes between slabs and the space
  // above).
  const bool slab_half = zone_lo_ > range_base_;
  auto by_size = runs_.lower_bound({size, 0});
  auto by_addr = run_at_.end();
  if (slab_half) {
    by_addr = run_at_.upper_bound(zone_lo_);
    if (by_addr != run_at_.begin() && std::prev(by_addr)->start + std::prev(by_addr)->size > zone_lo_) --by_addr;
  }
  std::size_t seen = 0, looked = 0;
  while (cost) {
    std::uintptr_t run_start, hi;
    if (slab_half) {
      if (by_addr == run_at_.end() || by_addr->start >= zone_hi_) break;
      run_start = by_addr->start, hi = by_addr->start + by_addr->size;
      ++by_addr;
      if (hi - run_start < size) continue;
    } else {
      if (by_size == runs_.end() || seen >= runs) break;
      run_start = by_size->start, hi = by_size->start + by_size->size;
      ++by_size;
      if (run_start >= zone_hi_) continue;  // the slab zone's runs (arena_options::slab_zone)
    }
    // Only the request's half (arena_options::slab_zone).
    auto first = run_start < zone_lo_ ? block_at(run_start = zone_lo_) : find_block(run_start);
    if (hi > zone_hi_) hi = zone_hi_;
    if (hi <= run_start) continue;  // (the slab half's runs all reach past zone_lo_)
    bool fits = false;
    if (foreign) {
      std::uintptr_t lo = run_start;
      std::size_t walked = 0;
      for (auto b = first; b != blocks_.end() && b->first < hi; ++b) {
        if (++walked > 64 && !all) {  // a long run: its first stretches are enough
          fits |= consider(lo, b->first, first);
          lo = hi;
          break;
        }
        if (b->second.st == state::owned && b->second.stream != s) {
          fits |= consider(lo, b->first, first);
          lo = b->first + b->second.size;
          first = std::next(b);
        }
      }
      if (lo < hi) fits |= consider(lo, hi, first);
    } else {
      fits = consider(run_start, hi, first);
    }
    if (slab_half) continue;
    if (fits) ++seen;
    if (++looked >= 64 && !all && seen) break;  // alignment kept failing: enough
  }
  return cost != SIZE_MAX;
}

void arena::add_busy(std::uintptr_t a, std::size_t n, bool add) {
  std::uintptr_t end = a + n;
  for (std::size_t g = granule_of(a); granule_addr(g) < end; ++g) {
    std::uintptr_t gs = granule_addr(g);
    std::size_t overlap = std::min<std::uintptr_t>(end, gs + granule_) - std::max(a, gs);
    if (add) {
      if (busy_[g] == 0 && granule_handle_[g].value) idle_.erase(g);
      busy_[g] += static_cast<std::uint32_t>(overlap);
    } else {
      busy_[g] -= static_cast<std::uint32_t>(overlap);
      if (busy_[g] == 0 && granule_handle_[g].value) idle_.insert(g);
    }
  }
}

void arena::set_mapped(std::uintptr_t a, std::uintptr_t e, bool mapped) {
  auto it = block_at(a);
  index_erase(it);
  const std::uintptr_t end = it->first + it->second.size;
  if (it->first < a) {
    it->second.size = a - it->first;
    index_insert(it);
    it = emplace_block_before(std::next(it), a, block{end - a, it->second.segment, state::ready, !mapped, 0, 0, {}});
  }
  if (end > e) {
    auto tail = emplace_block_before(std::next(it), e, block{end - e, it->second.segment, state::ready, !mapped, 0, 0, {}});
    index_insert(tail);
    it->second.size = e - a;
  }
  it->second.mapped = mapped;
  make_free(it);  // merges with neighbours of its new kind
}

// Runs change by the thousand per second on a busy pool, and both their entries change in place:
// in run_at_ always (runs never overlap, so a run keeps its rank by start), in runs_ where the run
// keeps its rank by size (run_by_size), else its node moves — no node freed and taken again.
void arena::reshape_run(run_map::iterator r, std::uintptr_t start, std::size_t size) {
  const auto at = r->by_size;
  const run_by_size now{size, start};
  if ((at == runs_.begin() || *std::prev(at) < now) && (std::next(at) == runs_.end() || now < *std::next(at))) {
    at->size = size;
    at->start = start;
  } else {
    auto by_size = runs_.extract(at);
    by_size.value() = now;
    r->by_size = runs_.insert(std::move(by_size)).position;
  }
  if (start != r->start) {
    run_by_start_.erase(r->start);
    run_by_start_.insert(start, r);
  }
  if (start + size != r->start + r->size) {
    run_by_end_.erase(r->start + r->size);
    run_by_end_.insert(start + size, r);
  }
  r->start = start;
  r->size = size;
}

void arena::run_insert(run_map::iterator next, std::uintptr_t start, std::size_t size) {
  auto r = run_at_.emplace_hint(next, run_entry{start, size, runs_.insert(run_by_size{size, start}).first});
  run_by_start_.insert(start, r);
  run_by_end_.insert(start + size, r);
}

void arena::run_erase(run_map::iterator r) {
  run_by_start_.erase(r->start);
  run_by_end_.erase(r->start + r->size);
  runs_.erase(r->by_size);
  run_at_.erase(r);
}

void arena::run_add(std::uintptr_t a, std::size_t n) {
  const run_map::iterator* before = run_by_end_.find(a);  // the run that ends where [a, a + n) starts
  const run_map::iterator* after = run_by_start_.find(a + n);
  if (before) {
    // Grows the run before it, and swallows the one after it.
    const auto prev = *before;
    std::size_t grown = prev->size + n;
    if (after) {
      grown += (*after)->size;
      run_erase(*after);
    }
    reshape_run(prev, prev->start, grown);
  } else if (after) {
    reshape_run(*after, a, (*after)->size + n);  // the run after it now starts at `a`
  } else {
    run_insert(run_at_.lower_bound(a), a, n);
  }
}

void arena::run_remove(std::uintptr_t a, std::size_t n) {
  const std::uintptr_t e = a + n;
  run_map::iterator r;
  if (const auto* at = run_by_start_.find(a)) r = *at;       // the block takes the run's front...
  else if (const auto* at_end = run_by_end_.find(e)) r = *at_end;  // ...or its back
  else r = std::prev(run_at_.upper_bound(a));
  const std::uintptr_t lo = r->start, hi = r->start + r->size;
  if (lo < a) {
    // The run keeps its start and shrinks; what lies past the block is a run of its own.
    reshape_run(r, lo, a - lo);
    if (e < hi) run_insert(std::next(r), e, hi - e);
  } else if (e < hi) {
    reshape_run(r, e, hi - e);  // the block takes the run's front
  } else {
    run_erase(r);
  }
}

// Each piece is one mapping; consecutive single-granule pieces go in one upstream call (one
// cuMemSetAccess for them all). Each call's granules are recorded as soon as it succeeds, so when
// a later call throws, `done` says how many pieces are mapped and accounted for.
void arena::map_pieces(std::size_t g0, const piece* pieces, std::size_t count, std::size_t& done) {
  std::vector<physical_handle> singles;
  std::size_t g = g0;
  const bool timed = opts_.remap_time_budget > 0;
  for (done = 0; done < count;) {
    std::size_t end = done + 1;
    const std::uint64_t t0 = timed ? now_ns() : 0;
    // A handle still mapped here (a kept mapping): mapped again without a driver call.
    const bool reused = pieces[done].granules == 1 && kept_[g] == pieces[done].h;
    if (reused) {
      forget_kept(g);
    } else if (pieces[done].granules == 1) {
      singles.clear();
      for (end = done; end < count && pieces[end].granules == 1 && kept_[g + (end - done)] != pieces[end].h; ++end) {
        drop_kept(g + (end - done));  // another handle's kept mapping: unmapped first
        singles.push_back(pieces[end].h);
      }
      up_.map_run(reinterpret_cast<void*>(granule_addr(g)), granule_, singles.data(), singles.size());
    } else {
      for (std::size_t k = 0; k < pieces[done].granules; ++k) drop_kept(g + k);
      up_.map(reinterpret_cast<void*>(granule_addr(g)), pieces[done].granules * granule_, pieces[done].h);
    }
    if (!reused) ++map_calls_;
    if (timed && !reused) {
      // Mapping a spare is the second half of a move; mapping new memory is growth, which any
      // allocator pays for. The call's time is split by granules between the two.
      std::size_t moved = 0, all = 0;
      for (std::size_t k = done; k < end; ++k) {
        all += pieces[k].granules;
        if (!pieces[k].grown) moved += pieces[k].granules;
      }
      if (moved) charge_remap((now_ns() - t0) * moved / all, moved);
    }
    const std::size_t from = g;
    for (; done < end; ++done) {
      if (pieces[done].alias) stream_ordered_moved_ += pieces[done].granules;
      if (pieces[done].granules == 1) home_[pieces[done].h.value] = g;
      for (std::size_t k = 0; k < pieces[done].granules; ++k, ++g) {
        granule_handle_[g] = pieces[done].h;
        mapped_bits_.set(g);
        handle_head_[g] = static_cast<std::uint32_t>(k);
        handle_granules_[g] = static_cast<std::uint32_t>(pieces[done].granules);
        idle_.insert(g);  // until the block over it is carved
        ++mapped_;
        ++maps_;
        if (!reused) ++driver_maps_;
      }
    }
    set_mapped(granule_addr(from), granule_addr(g), true);
  }
}

void arena::unmap_run(std::size_t g0, std::size_t g1, bool keep_mappings) {
  const bool keep = keep_mappings && std::all_of(handle_granules_.begin() + static_cast<std::ptrdiff_t>(g0),
                                                 handle_granules_.begin() + static_cast<std::ptrdiff_t>(g1),
                                                 [](std::uint32_t n) { return n == 1; });
  if (!keep) {
    up_.unmap(reinterpret_cast<void*>(granule_addr(g0)), (g1 - g0) * granule_);
    ++unmap_calls_;
  }
  for (std::size_t g = g0; g < g1; ++g) {
    if (handle_head_[g] == 0) add_spare({granule_handle_[g], handle_granules_[g]});
    idle_.erase(g);
    leave_granule(g, keep);
  }
  set_mapped(granule_addr(g0), granule_addr(g1), false);
}

void arena::leave_granule(std::size_t g, bool keep) {
  const physical_handle h = granule_handle_[g];
  if (auto home = home_.find(h.value); home != home_.end() && home->second == g) home_.erase(home);
  if (keep) {
    kept_[g] = h;
    kept_end_ = std::max(kept_end_, g + 1);
    ++kept_count_;
  } else {
    ++driver_unmaps_;
  }
  granule_handle_[g] = physical_handle{0};
  mapped_bits_.clear(g);
  handle_head_[g] = handle_granules_[g] = 0;
  --mapped_;
  ++unmaps_;
}

bool arena::take_kept(std::size_t t, std::size_t keep_lo, std::size_t keep_hi, bool from_idle, std::vector<piece>& got) {
  const physical_handle h = kept_[t];
  if (!h.value) return false;
  if (const std::size_t i = spare_index(h); i != SIZE_MAX) {
    take_spare_at(i, got);
    return true;
  }
  auto home = from_idle ? home_.find(h.value) : home_.end();
  if (home == home_.end()) return false;
  const std::size_t g = home->second;
  // Idle where it is (no busy byte: every free over it done, no retiring place) and not under the
  // request itself.
  if (granule_handle_[g] != h || handle_granules_[g] != 1 || busy_[g] || (g >= keep_lo && g < keep_hi)) return false;
  unmap_run(g, g + 1, true);  // kept mapped there in turn; the handle becomes the newest spare
  take_spare_at(spares_.size() - 1, got);
  return true;
}

std::size_t arena::spare_index(physical_handle h) const {
  for (std::size_t i = 0; i < spares_.size(); ++i)
    if (spares_[i].h == h) return i;
  return SIZE_MAX;
}

void arena::take_spare_at(std::size_t i, std::vector<piece>& got) {
  got.push_back(spares_[i]);
  remove_spare_at(i);
}

void arena::remove_spare_at(std::size_t i) {
  spare_granules_ -= spares_[i].granules;
  spares_[i] = spares_.back();
  spares_.pop_back();
  if (spares_.empty()) largest_spare_ = 0;
}

void arena::forget_kept(std::size_t g) {
  if (!kept_[g].value) return;
  kept_[g] = physical_handle{0};
  --kept_count_;
}

void arena::drop_kept(std::size_t g) {
  if (!kept_[g].value) return;
  up_.unmap(reinterpret_cast<void*>(granule_addr(g)), granule_);
  ++unmap_calls_;
  ++driver_unmaps_;  // the granule left its place earlier (counted in unmaps_ then)
  forget_kept(g);
}

void arena::drop_kept_of(physical_handle h) {
  for (std::size_t g = 0; g < kept_end_ && kept_count_; ++g)
    if (kept_[g] == h) drop_kept(g);
}

bool arena::handle_idle(std::size_t head) const {
  for (std::size_t g = head; g < head + handle_granules_[head]; ++g)
    if (busy_[g]) return false;
  return true;
}

std::size_t arena::idle_budget_granules() const {
  if (opts_.idle_budget <= 0) return 0;
  return static_cast<std::size_t>(opts_.idle_budget * double(allocated_)) / granule_;
}

// The budget's clock. A modeled cost above what a move measured is time the job would have spent
// on a GPU, so it counts as time passed too: else the simulator, whose moves take no time, would
// see a job that never gives the budget time to refill.
std::uint64_t arena::now_ns() const {
  const std::uint64_t t =
      opts_.remap_clock_ns
          ? opts_.remap_clock_ns()
          : static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                           std::chrono::steady_clock::now().time_since_epoch())
                                           .count());
  return t + remap_modeled_extra_ns_;
}

// The bucket fills at remap_time_budget ns per ns that passes, up to one second's worth: a job may
// spend what it saved over the last second at once (a step's reshaping comes in bursts), not what
// it saved over an idle hour. A move is allowed while the bucket is not in debt, and its cost is
// known only after it ran, so one move may overdraw; the next waits until time has repaid it.
bool arena::remap_budget_spent() {
  if (opts_.remap_time_budget <= 0) return false;
  const std::uint64_t now = now_ns();
  if (now > remap_refilled_at_) {
    const double cap = opts_.remap_time_budget * 1e9;
    remap_tokens_ns_ = std::min(cap, remap_tokens_ns_ + opts_.remap_time_budget * double(now - remap_refilled_at_));
    remap_refilled_at_ = now;
  }
  return remap_tokens_ns_ < 0;
}

bool arena::remap_allowed() {
  if (!remap_budget_spent()) return true;
  ++remaps_deferred_;
  return false;
}

void arena::charge_remap(std::uint64_t ns, std::size_t granules) {
  if (opts_.remap_time_budget <= 0 || granules == 0) return;
  const double cost = std::max(double(ns), opts_.remap_cost_ns_per_granule * double(granules));
  remap_modeled_extra_ns_ += static_cast<std::uint64_t>(cost - double(ns));
  remap_tokens_ns_ -= cost;
  remap_charged_ns_ += static_cast<std::uint64_t>(cost);
}

std::size_t arena::top_idle_handle(std::size_t most, bool larger, std::size_t keep_lo, std::size_t keep_hi) const {
  for (std::size_t g = idle_.last_below(granule_handle_.size()); g != granule_set::none;) {
    const std::size_t head = g - handle_head_[g], n = handle_granules_[g];
    const bool kept = head < keep_hi && head + n > keep_lo;
    if ((larger ? n > most : n <= most) && !kept && handle_idle(head)) return head;
    g = idle_.last_below(head);  // the rest of this handle is no better
  }
  return SIZE_MAX;
}

// The victim is the highest idle handle outside the window, with the idle handles right below
// it: contiguous idle granules lie in one mapped ready block, so the run is one unmap call. (Which
// idle granules go made no difference to peak reserved on the shared traces: lowest first, least
// recently idle first and smallest hole first were tried.) Within the idle budget only the idle
// granules above it may go.
std::size_t arena::harvest(std::size_t want, std::size_t keep_lo, std::size_t keep_hi, bool within_budget,
                           bool keep_mappings) {
  if (idle_.empty() || want == 0) return 0;
  if (within_budget && opts_.keep_idle) return 0;
  if (within_budget) {
    const std::size_t keep = idle_budget_granules();
    if (idle_.size() <= keep) return 0;
    want = std::min(want, idle_.size() - keep);
  }
  const std::size_t top = top_idle_handle(want, false, keep_lo, keep_hi);
  if (top == SIZE_MAX) return 0;
  std::size_t g0 = top, g1 = top + handle_granules_[top];
  while (g0 > 0 && granule_handle_[g0 - 1].value) {
    const std::size_t head = g0 - 1 - handle_head_[g0 - 1], n = handle_granules_[head];
    if (g1 - g0 + n > want || (head < keep_hi && g0 > keep_lo) || !handle_idle(head)) break;
    g0 = head;
  }
  const std::uint64_t t0 = opts_.remap_time_budget > 0 ? now_ns() : 0;
  // Kept mapped or not, the budget is charged for this half of the move as before: it rations
  // moves, and what a kept mapping saves shows in the driver counts, not in the budget.
  unmap_run(g0, g1, keep_mappings);
  if (opts_.remap_time_budget > 0) charge_remap(now_ns() - t0, g1 - g0);
  return g1 - g0;
}

std::size_t arena::move_pending(std::size_t want, std::size_t keep_lo, std::size_t keep_hi, stream_ref s,
                                bool within_budget, std::vector<piece>& got) {
  if (!opts_.stream_ordered_moves || want == 0 || (within_budget && opts_.keep_idle)) return 0;
  auto mine = owned_.find(s);
  if (mine == owned_.end()) return 0;
  // The stream's largest free blocks first (by size, then address, from the top): a handle all
  // free for it most likely lies under one. A bounded look: this runs before every growth.
  std::vector<std::pair<std::size_t, std::uintptr_t>> largest;
  for_each_owned(mine->second, [&](std::uintptr_t addr, const block& b) { largest.emplace_back(b.size, addr); });
  const auto looked = std::min<std::size_t>(largest.size(), 32);
  std::partial_sort(largest.begin(), largest.begin() + static_cast<std::ptrdiff_t>(looked), largest.end(),
                    std::greater<>());
  for (auto c = largest.begin(); c != largest.begin() + static_cast<std::ptrdiff_t>(looked); ++c) {
    const std::uintptr_t end = c->second + c->first;
    for (std::size_t g = granule_of(c->second); g < granule_handle_.size() && granule_addr(g) < end;) {
      if (!granule_handle_[g].value) {
        ++g;
        continue;
      }
      const std::size_t head = g - handle_head_[g], n = handle_granules_[head];
      const bool kept = head < keep_hi && head + n > keep_lo;
      if (n <= want && !kept && free_for(head, s)) {
        // Within the idle budget the pool keeps that share of live memory cached, as harvest does.
        if (within_budget && (reserved_bytes() - allocated_) / granule_ < idle_budget_granules() + n) return 0;
        const piece p{granule_handle_[head], n, false, true, granule_addr(head)};
        retire(head, head + n, s);
        got.push_back(p);
        return n;
      }
      g = head + n;
    }
  }
  return 0;
}

bool arena::free_for(std::size_t head, stream_ref s) const {
  const std::uintptr_t a = granule_addr(head), e = granule_addr(head + handle_granules_[head]);
  for (auto b = std::prev(blocks_.upper_bound(a)); b != blocks_.end() && b->first < e; ++b) {
    const block& x = b->second;
    if (x.st == state::ready ? !x.mapped : !(x.st == state::owned && x.stream == s)) return false;
  }
  return true;
}

// The blocks over [g0, g1) — ready, or owned by `s` — become one retiring block, out of every
// index and run; blocks reaching past either end are split there and keep their outer part.
void arena::retire(std::size_t g0, std::size_t g1, stream_ref s) {
  const std::uintptr_t a = granule_addr(g0), e = granule_addr(g1);
  cut_at(a);
  cut_at(e);
  auto it = find_block(a);
  const std::uint32_t segment = it->second.segment;
  std::uint64_t seq = 0;
  while (it != blocks_.end() && it->first < e) {
    index_erase(it);
    if (it->second.st == state::ready) add_busy(it->first, it->second.size, true);  // no one may take it now
    else seq = std::max(seq, it->second.seq);
    it = erase_block(it);
  }
  emplace_block_before(it, a, block{e - a, segment, state::retiring, true, s, seq, {}});
  run_remove(a, e - a);
  retiring_.push_back(a);
  retiring_granules_ += g1 - g0;
}

// The stream ran past every free at this place: unmapped (its handle lives at its new place), and
// ready unmapped memory again. The unmap is the second half of a move, charged to the remap time
// budget as harvest's is.
void arena::finish_retiring(block_map::iterator it) {
  const std::uintptr_t a = it->first;
  const std::size_t g0 = granule_of(a), g1 = granule_of(a + it->second.size);
  // A single-granule handle still in the pool (mapped at its new place, or a spare) stays mapped
  // here as a kept mapping: a later request here takes it back with no driver call.
  auto alive = [&](physical_handle h) { return home_.count(h.value) || spare_index(h) != SIZE_MAX; };
  const auto orphan = std::find(released_under_.begin(), released_under_.end(), g0);
  const bool released = orphan != released_under_.end();
  if (released) released_under_.erase(orphan);
  const bool keep = !released && handle_granules_[g0] == 1 && g1 == g0 + 1 && alive(granule_handle_[g0]);
  if (!keep) {
    const std::uint64_t t0 = opts_.remap_time_budget > 0 ? now_ns() : 0;
    up_.unmap(reinterpret_cast<void*>(a), (g1 - g0) * granule_);
    if (opts_.remap_time_budget > 0) charge_remap(now_ns() - t0, g1 - g0);
    ++unmap_calls_;
  }
  for (std::size_t g = g0; g < g1; ++g) leave_granule(g, keep);
  retiring_granules_ -= g1 - g0;
  add_busy(a, it->second.size, false);  // unmapped now: not idle
  it->second.st = state::ready;
  it->second.mapped = false;
  it->second.stream = 0;
  it->second.seq = 0;
  run_add(a, it->second.size);
  make_free(it);
}

// Handles a failed request had gathered: memory it created goes back to the upstream (a failure
// must not leave the pool holding what it grabbed on the way), spares stay spares.
void arena::give_back_pieces(const piece* begin, const piece* end) {
  for (const piece* p = begin; p != end; ++p) {
    if (p->grown) {
      up_.release_physical(p->h, p->granules * granule_);
      ++upstream_releases_;
    } else {
      keep_unmapped(*p);
    }
  }
}

void arena::keep_unmapped(const piece& p) {
  // A request that gathered a handle from a retiring place and then failed (a first attempt that
  // may not grow fails often) puts it back: the place was only marked, no driver call was made,
  // so it is its stream's free memory again. (A spare instead if a wait meanwhile unmapped it.)
  auto it = p.alias ? find_block(p.from) : blocks_.end();
  if (it == blocks_.end() || it->second.st != state::retiring || granule_handle_[granule_of(p.from)] != p.h)
    return add_spare(p);
  retiring_.erase(std::find(retiring_.begin(), retiring_.end(), p.from));
  retiring_granules_ -= p.granules;
  it->second.st = state::owned;  // every byte stays busy until the stream runs past `seq`
  run_add(it->first, it->second.size);
  make_free(it);
}

void arena::add_spare(const piece& p) {
  spares_.push_back({p.h, p.granules, false});  // mapped later, it is memory moved, not grown
  spare_granules_ += p.granules;
  largest_spare_ = std::max(largest_spare_, p.granules);
}

void arena::release_spare(std::size_t i) {
  drop_kept_of(spares_[i].h);
  // A place still retiring may map this handle (its owner was freed on another stream): once the
  // handle is released its value may name a new one, so that place must not end as a kept mapping.
  for (std::uintptr_t a : retiring_)
    if (granule_handle_[granule_of(a)] == spares_[i].h) released_under_.push_back(granule_of(a));
  up_.release_physical(spares_[i].h, spares_[i].granules * granule_);
  remove_spare_at(i);
  ++upstream_releases_;
}

bool arena::release_oversized(std::size_t most, std::size_t keep_lo, std::size_t keep_hi, bool within_budget) {
  for (std::size_t i = 0; i < spares_.size(); ++i)
    if (spares_[i].granules > most) {
      release_spare(i);
      return true;
    }
  if (within_budget && opts_.keep_idle) return false;
  const std::size_t head = top_idle_handle(most, true, keep_lo, keep_hi);
  if (head == SIZE_MAX) return false;
  const std::size_t n = handle_granules_[head];
  if (within_budget && idle_.size() < idle_budget_granules() + n) return false;
  unmap_run(head, head + n);
  release_spare(spares_.size() - 1);
  return true;
}

bool arena::take_spare(std::size_t most, std::vector<piece>& got, std::size_t wanted_lo, std::size_t wanted_hi) {
  // A spare kept mapped in [wanted_lo, wanted_hi) is left alone: a later piece of the same run
  // takes it there at no cost. (Taking it here instead, rather than moving or growing, would cost
  // that piece a driver call and this one too.)
  const auto kept_lo = kept_.begin() + static_cast<std::ptrdiff_t>(std::min(wanted_lo, kept_end_));
  const auto kept_hi = kept_.begin() + static_cast<std::ptrdiff_t>(std::min(wanted_hi, kept_end_));
  auto wanted = [&](const piece& p) { return p.granules == 1 && std::find(kept_lo, kept_hi, p.h) != kept_hi; };
  // The first of the largest that fit. None is larger than largest_spare_: once one that large
  // is found, the rest need no look (by default every spare is one granule, and the pool asks
  // for one at a time while it moves memory: the whole list was walked per granule).
  const std::size_t enough = std::min(most, largest_spare_);
  std::size_t best = SIZE_MAX;
  for (std::size_t i = 0; i < spares_.size(); ++i)
    if (spares_[i].granules <= most && (best == SIZE_MAX || spares_[i].granules > spares_[best].granules) &&
        !wanted(spares_[i])) {
      best = i;
      if (spares_[i].granules == enough) break;
    }
  if (best == SIZE_MAX) return false;
  take_spare_at(best, got);
  return true;
}

bool arena::take_physical(std::size_t g0, std::size_t count, std::size_t keep_lo, std::size_t keep_hi, stream_ref s,
                          bool may_grow, std::vector<piece>& got, std::string* why) {
  bool covered = false, waited = false;
  std::size_t have = 0, most_new = max_handle_granules_;  // have: granules in got[first..]
  const std::size_t first = got.size();
  std::size_t earlier = 0;  // granules taken for the window's earlier runs
  for (const auto& p : got) earlier += p.granules;
  auto fail = [&](std::string text) {
    give_back_pieces(got.data() + first, got.data() + got.size());
    got.resize(first);
    set_why(why, std::move(text));
    return false;
  };
  while (have < count) {
    const std::size_t rest = count - have;
    const std::size_t taken = earlier + have;  // taken for this window: reserved, neither mapped nor spare
    const bool within_budget = !past_ceiling(taken + rest);
    // The handle still mapped where the next piece lands, if it is a spare or idle elsewhere: a
    // move with no driver call, whatever the remap time budget says (it rations driver time). Idle
    // memory the idle budget keeps in place stays there (else the place it leaves grows later).
    const bool idle_may_move = !within_budget || (!opts_.keep_idle && idle_.size() > idle_budget_granules());
    if (take_kept(g0 + have, keep_lo, keep_hi, idle_may_move, got)) {
      have += got.back().granules;
      continue;
    }
    if (take_spare(rest, got, g0 + have + 1, g0 + count)) {
      have += got.back().granules;
      continue;
    }
    // Same physical memory, mapped where it is needed now: no growth, no copy. (Unless the
    // remap time budget is spent: then growth first, and moves only when growing fails.) Within
    // the idle budget while growing stays under the reserve ceiling; past it, whatever is idle.
    const bool may_move = remap_allowed();
    if (may_move && harvest(rest, keep_lo, keep_hi, within_budget)) continue;
    if (!covered) {
      covered = true;
      clock_.cover_all();
      if (clock_.poll()) {
        promote();
        continue;
      }
    }
    // Memory this stream freed whose work is still queued: busy for every other stream, but this
    // request's work runs after it — map it here too, and let its old place retire.
    if (may_move && move_pending(rest, keep_lo, keep_hi, s, within_budget, got)) {
      have += got.back().granules;
      continue;
    }
    if (!may_grow) return fail("growth needed");
    // Idle memory above the budget that is only in handles too large for this run: give one back
    // rather than grow beside it.
    if (release_oversized(rest, keep_lo, keep_hi, within_budget)) continue;
    // Memory freed on streams still running before the free is busy: it cannot be unmapped while
    // their work may touch it. Waiting for them (the host only) makes it idle, to be moved here.
    if (opts_.wait_before_grow && !opts_.keep_idle && !waited && clock_.has_pending()) {
      waited = true;
      if (clock_.wait_all()) {
        promote();
        continue;
      }
    }
    const std::size_t n = std::min(rest, most_new);
    // Handles already taken for this window are reserved too, though neither mapped nor spare.
    const bool over_limit = reserved_bytes() + (taken + n) * granule_ > opts_.max_reserved_bytes;
    std::optional<physical_handle> h;
    if (!over_limit) {
      h = up_.create_physical(n * granule_);
      ++upstream_calls_;
    }
    if (h) {
      got.push_back({*h, n, true});
      have += n;
      continue;
    }
    if (n > 1) {  // the device (or the limit) may still have room for smaller handles
      most_new = 1;
      continue;
    }
    // No growth: the idle granules the budget kept come before waiting and failing.
    if (harvest(rest, keep_lo, keep_hi, false)) continue;
    if (release_oversized(rest, keep_lo, keep_hi, false)) continue;
    if (move_pending(rest, keep_lo, keep_hi, s, false, got)) {
      have += got.back().granules;
      continue;
    }
    if (!waited) {
      waited = true;
      if (clock_.wait_all()) {
        promote();
        continue;
      }
    }
    return fail(over_limit ? "the pool's limit (max_reserved_bytes) would be passed"
                           : fmt::format("upstream {} refused {} B of physical memory", up_.name(), granule_));
  }
  return true;
}

bool arena::map_window(std::uintptr_t a, std::size_t n, stream_ref s, bool may_grow, std::string* why,
                       std::uintptr_t req_lo, std::uintptr_t req_hi) {
  if (req_hi == 0) req_lo = a, req_hi = a + n;
  const std::size_t g_lo = granule_of(a), g_hi = granule_of(a + n - 1) + 1;
  // Runs of missing granules: each lies in one unmapped block and is filled with handles adding
  // up to its length exactly, mapped in one go.
  struct run_need {
    std::size_t g0, count, first_piece;
  };
  std::vector<run_need> runs;
  for (std::size_t g = g_lo; g < g_hi; ++g) {
    if (granule_handle_[g].value) continue;
    if (!runs.empty() && runs.back().g0 + runs.back().count == g)
      ++runs.back().count;
    else
      runs.push_back({g, 1, 0});
  }
  if (runs.empty()) return true;
  // More than the device can hold, whatever is moved: fail before creating any of it. (Else a
  // request larger than the device — a size computed wrong — would create handles until the
  // device refused, and a second attempt would do it again: on the H200, 70,000 calls.)
  // The test is what any success needs — the live bytes plus the granules to map — so memory
  // that could still be moved or waited for (idle, spare, freed on a stream still running) never
  // fails a request that fits.
  if (const std::size_t cap = up_.capacity_bytes()) {
    std::size_t missing = 0;
    for (const auto& r : runs) missing += r.count;
    if (allocated_ + missing * granule_ > cap) {
      set_why(why, fmt::format("the device holds {} B: with {} B live, {} B more cannot fit", cap, allocated_,
                               missing * granule_));
      return false;
    }
  }
  std::vector<piece> got;
  for (auto& r : runs) {
    r.first_piece = got.size();
    if (!take_physical(r.g0, r.count, g_lo, g_hi, s, may_grow, got, why)) {
      give_back_pieces(got.data(), got.data() + got.size());
      return false;
    }
  }
  for (std::size_t i = 0; i < runs.size(); ++i) {
    const std::size_t end = i + 1 < runs.size() ? runs[i + 1].first_piece : got.size();
    std::size_t done = 0;
    try {
      map_pieces(runs[i].g0, got.data() + runs[i].first_piece, end - runs[i].first_piece, done);
    } catch (...) {
      for (std::size_t k = runs[i].first_piece + done; k < got.size(); ++k) keep_unmapped(got[k]);
      throw;
    }
  }
  // Memory moved in stream order onto a granule the request covers only in part: the rest of that
  // granule is memory `s`'s queued work may still use at its old place, so it is `s`'s free memory
  // — reusable by `s` at once, by other streams only once `s` has run past the old place's frees.
  for (std::size_t i = 0; i < runs.size(); ++i) {
    const std::size_t end = i + 1 < runs.size() ? runs[i + 1].first_piece : got.size();
    std::uintptr_t pa = granule_addr(runs[i].g0);
    for (std::size_t k = runs[i].first_piece; k < end; pa += got[k].granules * granule_, ++k) {
      const piece& p = got[k];
      auto old = p.alias ? find_block(p.from) : blocks_.end();
      if (old == blocks_.end() || old->second.st != state::retiring || old->second.seq == 0) continue;
      const std::uintptr_t pe = pa + p.granules * granule_;
      if (pa < req_lo) hold_for(pa, std::min(pe, req_lo), s, old->second.seq);
      if (pe > req_hi) hold_for(std::max(pa, req_hi), pe, s, old->second.seq);
    }
  }
  return true;
}

// [x, y), ready mapped memory (or already `s`'s), becomes free memory owned by `s` until its
// clock passes `seq`.
void arena::hold_for(std::uintptr_t x, std::uintptr_t y, stream_ref s, std::uint64_t seq) {
  cut_at(x);
  cut_at(y);
  for (auto it = find_block(x); it != blocks_.end() && it->first < y;) {
    index_erase(it);
    block& b = it->second;
    if (b.st == state::ready) {
      add_busy(it->first, b.size, true);
      b.st = state::owned;
      b.stream = s;
      b.seq = seq;
    } else {
      b.seq = std::max(b.seq, seq);
    }
    const std::uintptr_t next_at = it->first + b.size;
    make_free(it);  // may merge with its neighbours, both s's now
    it = blocks_.lower_bound(next_at);
  }
}

bool arena::deallocate(std::uintptr_t addr, stream_ref s, const std::vector<stream_ref>& also_on) {
  auto it = find_block(addr);
  if (it == blocks_.end() || it->second.st != state::live) return false;
  allocated_ -= it->second.size;
  if (!also_on.empty()) {
    // Used on several streams: reusable by anyone once every one of them has run past this free.
    it->second.st = state::waiting;
    it->second.waits.clear();
    it->second.waits.push_back(clock_.note_free(s));
    for (stream_ref u : also_on)
      if (u != s) it->second.waits.push_back(clock_.note_free(u));
    waiting_.push_back(addr);
  } else {
    stream_mark m = clock_.note_free(s);
    it->second.st = state::owned;
    it->second.stream = s;
    it->second.seq = m.seq;
    if (virtual_) run_add(it->first, it->second.size);
    make_free(it);
  }
  if (opts_.release_threshold_bytes != SIZE_MAX && reserved_bytes() - allocated_ > opts_.release_threshold_bytes)
    release(opts_.release_threshold_bytes);
  return true;
}

std::size_t arena::live_size(std::uintptr_t addr) const {
  auto it = find_block(addr);
  return it == blocks_.end() || it->second.st != state::live ? 0 : it->second.size;
}

bool arena::is_free_block_start(std::uintptr_t addr) const {
  auto it = find_block(addr);
  return it != blocks_.end() && it->second.st != state::live;
}

void arena::promote() {
  // Retiring places first: a handle's new place can turn ready only after its stream ran past the
  // frees at the old one (same stream, later free), so by then the old place is unmapped.
  for (std::size_t i = 0; i < retiring_.size();) {
    auto it = find_block(retiring_[i]);
    if (clock_.met({it->second.stream, it->second.seq})) {
      retiring_[i] = retiring_.back();
      retiring_.pop_back();
      finish_retiring(it);
    } else {
      ++i;
    }
  }
  std::vector<std::uintptr_t> turning;
  for (auto& [s, o] : owned_) {
    const std::uint64_t done = clock_.completed(s);
    if (done == 0) continue;
    for_each_owned(o, [&](std::uintptr_t addr, const block& b) {
      if (b.seq <= done) turning.push_back(addr);
    });
  }
  for (std::uintptr_t addr : turning) {
    auto it = find_block(addr);
    index_erase(it);
    it->second.st = state::ready;
    it->second.stream = 0;
    it->second.mapped = true;
    if (virtual_) add_busy(it->first, it->second.size, false);  // still in its run
    make_free(it);
  }
  for (std::size_t i = 0; i < waiting_.size();) {
    auto it = find_block(waiting_[i]);
    const auto& w = it->second.waits;
    if (std::all_of(w.begin(), w.end(), [&](const stream_mark& m) { return clock_.met(m); })) {
      it->second.st = state::ready;
      it->second.stream = 0;
      it->second.waits.clear();
      it->second.mapped = true;
      if (virtual_) {
        add_busy(it->first, it->second.size, false);
        run_add(it->first, it->second.size);
      }
      make_free(it);
      waiting_[i] = waiting_.back();
      waiting_.pop_back();
    } else {
      ++i;
    }
  }
}

void arena::release(std::size_t keep_cached) {
  clock_.cover_all();
  const bool moved = keep_cached == 0 ? clock_.wait_all() : clock_.poll();
  if (moved || !retiring_.empty()) promote();  // a retiring place's mark may have been met earlier
  auto cached = [&] { return reserved_bytes() - allocated_; };
  if (virtual_) {
    // Idle handles go whole: with keep_cached > 0 one larger than the excess stays mapped.
    while (cached() > keep_cached) {
      while (cached() > keep_cached && !spares_.empty()) release_spare(spares_.size() - 1);
      if (cached() <= keep_cached) break;
      const std::size_t excess = (cached() - keep_cached + granule_ - 1) / granule_;
      if (!harvest(keep_cached ? excess : SIZE_MAX, 0, 0, false, false)) break;  // a run per call
    }
    return;
  }
  for (std::size_t i = 0; i < segments_.size() && cached() > keep_cached; ++i) {
    auto& seg = segments_[i];
    if (!seg.alive) continue;
    auto it = find_block(seg.base);
    if (it == blocks_.end() || it->second.st != state::ready || it->second.size != seg.size) continue;
    index_erase(it);
    erase_block(it);
    up_.free_segment(reinterpret_cast<void*>(seg.base), seg.size);
    seg.alive = false;
    segment_bytes_ -= seg.size;
    ++upstream_releases_;
  }
}

std::size_t arena::reserved_bytes() const noexcept {
  // A retiring place maps memory its new place (or a spare) already counts.
  return virtual_ ? (mapped_ + spare_granules_ - retiring_granules_) * granule_ : segment_bytes_;
}

// Ready blocks in the index on a virtual upstream are mapped ones, and owned blocks are always
// mapped: the largest of them is the largest mapped free block, as pool_stats documents.
std::size_t arena::largest_free_block() const {
  std::size_t best = ready_.empty() ? 0 : ready_.rbegin()->first;
  ready_list_.for_each([&](std::uintptr_t, const block& b) { best = std::max(best, b.size); });
  for (const auto& [s, o] : owned_) for_each_owned(o, [&](std::uintptr_t, const block& b) { best = std::max(best, b.size); });
  return best;
}

std::vector<oom_report::stream_cache> arena::owned_free_per_stream() const {
  std::vector<oom_report::stream_cache> out;
  for (const auto& [s, o] : owned_) {
    std::size_t bytes = 0;
    for_each_owned(o, [&](std::uintptr_t, const block& b) { bytes += b.size; });
    out.push_back({s, bytes});
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.stream < b.stream; });
  return out;
}

void arena::append_blocks(std::vector<block_info>& out) const {
  const std::uintptr_t top = range_base_ + align_up(high_water_, granule_);
  for (const auto& [addr, b] : blocks_) {
    block_info bi{addr, b.size, block_info::state::cached, b.stream, b.segment};
    if (b.st == state::live) bi.st = block_info::state::live;
    if (b.mapped) {
      out.push_back(bi);
      continue;
    }
    // Unmapped ready memory; the untouched top of the range is cut at the high-water mark.
    if (addr >= top) continue;
    bi.bytes = std::min<std::uintptr_t>(addr + b.size, top) - addr;
    bi.st = block_info::state::unmapped;
    out.push_back(bi);
  }
}

void arena::check() const {
  auto fail = [](const std::string& what) { throw std::logic_error("arena invariant broken: " + what); };
  std::size_t allocated = 0, ready_count = 0, void_count = 0, owned_count = 0, retiring = 0;
  std::map<std::uintptr_t, std::size_t> runs;  // recounted: maximal stretches of free blocks
  std::uintptr_t run_start = 0, run_end = 0;
  auto close_run = [&] {
    if (run_end > run_start) runs.emplace(run_start, run_end - run_start);
    run_start = run_end = 0;
  };
  std::vector<std::uint64_t> busy(busy_.size(), 0);
  std::uintptr_t expect = 0;
  std::uint32_t seg = UINT32_MAX;
  if (block_at_start_.size() != blocks_.size()) fail("the table of blocks by start differs from the blocks");
  const block* prev = nullptr;
  for (const auto& [addr, b] : blocks_) {
    if (b.size == 0 || b.size % unit) fail(fmt::format("block {:#x} has size {}", addr, b.size));
    if (const auto* at = block_at_start_.find(addr); !at || &(*at)->second != &b)
      fail(fmt::format("block {:#x} is not in the table of blocks by start", addr));
    if (b.segment != seg) {
      if (prev && expect != segments_[seg].base + segments_[seg].size) fail("a segment is not tiled to its end");
      seg = b.segment;
      if (!segments_.at(seg).alive || addr != segments_[seg].base) fail(fmt::format("block {:#x} does not start its segment", addr));
      prev = nullptr;
    } else if (addr != expect) {
      fail(fmt::format("gap or overlap at {:#x} (expected {:#x})", addr, expect));
    }
    expect = addr + b.size;
    if (prev && prev->st == b.st &&
        ((b.st == state::ready && prev->mapped == b.mapped) || (b.st == state::owned && prev->stream == b.stream)))
      fail(fmt::format("free neighbours at {:#x} were not coalesced", addr));
    if ((b.st == state::ready || b.st == state::owned) && virtual_) {
      if (run_end != addr) close_run();
      if (run_end == 0) run_start = addr;
      run_end = addr + b.size;
    } else {
      close_run();
    }
    if (!b.mapped && (!virtual_ || b.st != state::ready)) fail(fmt::format("block {:#x} is unmapped but not ready", addr));
    if (virtual_ && b.st == state::ready) {
      const std::size_t g0 = (addr - range_base_) / granule_, g1 = (addr + b.size - range_base_ + granule_ - 1) / granule_;
      if (!b.mapped && ((addr - range_base_) % granule_ || b.size % granule_))
        fail(fmt::format("unmapped block {:#x} is not whole granules", addr));
      for (std::size_t g = g0; g < g1; ++g)
        if ((granule_handle_[g].value != 0) != b.mapped)
          fail(fmt::format("granule {} under {} ready block {:#x} is {}", g, b.mapped ? "mapped" : "unmapped", addr,
                           b.mapped ? "unmapped" : "mapped"));
    }
    switch (b.st) {
      case state::live: allocated += b.size; break;
      case state::ready:
        ++(b.mapped ? ready_count : void_count);
        if (!virtual_ && !ready_.count({b.size, addr})) fail(fmt::format("ready block {:#x} missing from the index", addr));
        break;
      case state::owned: {
        ++owned_count;
        auto o = owned_.find(b.stream);
        if (o == owned_.end() || (!virtual_ && !o->second.by_size.count({b.size, addr})))
          fail(fmt::format("owned block {:#x} missing from the index", addr));
        break;
      }
      case state::waiting: break;
      case state::retiring:
        if (!virtual_ || (addr - range_base_) % granule_ || b.size % granule_ ||
            std::find(retiring_.begin(), retiring_.end(), addr) == retiring_.end())
          fail(fmt::format("retiring block {:#x} is not whole granules on the retiring list", addr));
        retiring += b.size / granule_;
        break;
    }
    if (virtual_ && b.st != state::ready) {
      for (std::uintptr_t x = addr; x < addr + b.size;) {
        std::size_t g = (x - range_base_) / granule_;
        std::uintptr_t ge = std::min<std::uintptr_t>(addr + b.size, range_base_ + (g + 1) * granule_);
        busy[g] += ge - x;
        x = ge;
      }
    }
    prev = &b;
  }
  close_run();
  if (allocated != allocated_) fail(fmt::format("allocated bytes {} != counted {}", allocated_, allocated));
  // Each list links blocks of its kind, each once (prev and next agree), as many as it counts; with
  // as many of the kind counted above, every block of the kind is in its list.
  auto check_list = [&](const block_list& l, const std::string& name, auto&& of_kind) {
    std::size_t listed = 0;
    for (const block_node* n = l.head; n; n = n->second.list_next) {
      const block& b = n->second;
      if (!of_kind(b)) fail(fmt::format("{} holds block {:#x} of another kind", name, n->first));
      if (const auto at = find_block(n->first); at == blocks_.end() || &*at != n)
        fail(fmt::format("{} holds {:#x}, which is no block", name, n->first));
      if ((b.list_prev ? b.list_prev->second.list_next : l.head) != n || (b.list_next && b.list_next->second.list_prev != n))
        fail(fmt::format("{} breaks at {:#x}", name, n->first));
      if (++listed > l.count) fail(fmt::format("{} is longer than its count", name));
    }
    if (listed != l.count) fail(fmt::format("{} is shorter than its count", name));
  };
  if (!virtual_ && (ready_count != ready_.size() || void_count)) fail("a ready index holds blocks that are not ready");
  if (virtual_) {
    check_list(ready_list_, "the list of mapped ready blocks", [](const block& b) { return b.st == state::ready && b.mapped; });
    check_list(void_list_, "the list of unmapped ready blocks", [](const block& b) { return b.st == state::ready && !b.mapped; });
    if (ready_list_.count != ready_count || void_list_.count != void_count) fail("a ready list misses ready blocks");
  } else if (ready_list_.head || void_list_.head) {
    fail("a plain upstream's ready blocks are in a list");
  }
  if (virtual_) {
    if (!std::equal(runs.begin(), runs.end(), run_at_.begin(), run_at_.end(),
                    [](const auto& x, const auto& y) { return x.first == y.start && x.second == y.size; }) ||
        runs_.size() != run_at_.size())
      fail("the run index is off");
    for (auto r = run_at_.begin(); r != run_at_.end(); ++r) {
      const run_entry& run = *r;
      if (run.by_size->start != run.start || run.by_size->size != run.size || !runs_.count({run.size, run.start}))
        fail(fmt::format("run {:#x} missing from the size index", run.start));
      const auto* by_start = run_by_start_.find(run.start);
      const auto* by_end = run_by_end_.find(run.start + run.size);
      if (!by_start || *by_start != r || !by_end || *by_end != r)
        fail(fmt::format("run {:#x} missing from the tables of runs by start and end", run.start));
    }
    if (run_by_start_.size() != run_at_.size() || run_by_end_.size() != run_at_.size())
      fail("the tables of runs by start and end hold runs that are gone");
  }
  // Each stream's list links owned blocks of that stream (check_list); with every owned block's
  // stream listed (above) and the sum equal to the owned blocks counted, every owned block is in
  // its list.
  std::size_t owned_indexed = 0;
  for (const auto& [s, o] : owned_) {
    if (o.empty()) fail(fmt::format("stream {:#x} has an empty owned index", s));
    if (!virtual_ && o.list.head) fail(fmt::format("the owned blocks of stream {:#x} are in a list on a plain upstream", s));
    check_list(o.list, fmt::format("the owned list of stream {:#x}", s),
               [s = s](const block& b) { return b.st == state::owned && b.stream == s; });
    owned_indexed += o.by_size.size() + o.list.count;
  }
  if (owned_count != owned_indexed) fail("an owned index holds blocks that are not owned");
  if (virtual_) {
    std::size_t mapped = 0;
    for (std::size_t g = 0; g < busy_.size(); ++g) {
      const bool is_mapped = granule_handle_[g].value != 0;
      mapped += is_mapped;
      if (mapped_bits_.test(g) != is_mapped) fail(fmt::format("granule {}'s mapped bit is off", g));
      if (busy[g] != busy_[g]) fail(fmt::format("granule {} busy bytes {} != counted {}", g, busy_[g], busy[g]));
      if (busy_[g] && !is_mapped) fail(fmt::format("granule {} is in use but not mapped", g));
      if (is_mapped && !busy_[g] && !idle_.contains(g)) fail(fmt::format("granule {} is idle but not listed", g));
      if ((!is_mapped || busy_[g]) && idle_.contains(g)) fail(fmt::format("granule {} is listed idle but is not", g));
    }
    if (mapped != mapped_) fail("mapped granule count is off");
    for (std::size_t g = 0; g < busy_.size(); ++g) {
      if (!granule_handle_[g].value) continue;
      const std::size_t head = g - handle_head_[g];
      if (handle_head_[g] > g || handle_head_[head] != 0 || handle_granules_[head] != handle_granules_[g] ||
          granule_handle_[head] != granule_handle_[g] || handle_head_[g] >= handle_granules_[g])
        fail(fmt::format("granule {} is not part of a whole mapped handle", g));
      if (handle_head_[g] == 0)
        for (std::size_t k = 1; k < handle_granules_[g]; ++k)
          if (g + k >= busy_.size() || granule_handle_[g + k] != granule_handle_[g] || handle_head_[g + k] != k)
            fail(fmt::format("the handle mapped at granule {} is not mapped whole", g));
    }
    std::size_t spare = 0;
    for (const auto& p : spares_) spare += p.granules;
    if (spare != spare_granules_) fail("spare granule count is off");
    if (retiring != retiring_granules_ || retiring_.size() > retiring) fail("retiring granule count is off");
    // Every handle has one owner: a place that is not retiring, or a spare. (A retiring place may
    // outlive its handle's owner only when the owner was freed on another stream.)
    std::vector<bool> at_retiring(busy_.size(), false);
    for (std::uintptr_t a : retiring_)
      for (std::size_t g = granule_of(a); g < granule_of(a + blocks_.at(a).size); ++g) at_retiring[g] = true;
    std::unordered_map<std::uint64_t, int> owners;
    for (std::size_t g = 0; g < busy_.size(); ++g)
      if (granule_handle_[g].value && handle_head_[g] == 0 && !at_retiring[g]) ++owners[granule_handle_[g].value];
    for (const auto& p : spares_) ++owners[p.h.value];
    for (const auto& [h, n] : owners)
      if (n != 1) fail(fmt::format("physical handle {} has {} owners", h, n));
    // Kept mappings: only on granules the arena counts unmapped and below kept_end_, each of a
    // live handle (mapped or spare); home_ names where each single-granule handle is mapped.
    std::size_t kept = 0;
    for (std::size_t g = 0; g < kept_.size(); ++g) {
      const physical_handle h = kept_[g];
      if (!h.value) continue;
      ++kept;
      if (granule_handle_[g].value) fail(fmt::format("granule {} is mapped and holds a kept mapping", g));
      if (!owners.count(h.value)) fail(fmt::format("granule {} keeps a mapping of handle {}, which is gone", g, h.value));
      if (g >= kept_end_) fail(fmt::format("the kept mapping at granule {} lies past the scanned range", g));
    }
    if (kept != kept_count_) fail("kept mapping count is off");
    for (const auto& [h, g] : home_)
      if (g >= granule_handle_.size() || granule_handle_[g].value != h || handle_granules_[g] != 1)
        fail(fmt::format("handle {} is not mapped at granule {}, its listed home", h, g));
  }
}

}  // namespace gpumem::detail
