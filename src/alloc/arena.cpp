// The arena's life and its entry points: construction over a plain or virtual upstream, a
// request placed (virtual: `place`, then granules mapped, then carved; plain: best fit, then a new
// segment), a free, promotion of frees whose streams have run past them, and release to the
// upstream.
#include "arena.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <stdexcept>

namespace gpumem::detail {
namespace {
constexpr std::size_t kTerabyte = std::size_t{1} << 40;
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
  auto it = emplace_block(range_base_, block{range_bytes_, 0, state::ready, false, {}, 0, {}});
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
  auto it = emplace_block(base, block{seg, static_cast<std::uint32_t>(segments_.size() - 1), state::ready, true, {}, 0, {}});
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
  return map_window(range_base_, align_up(bytes, granule_), stream_ref{}, true, why);
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
  // granules still mapped, and stop costing driver calls.
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
  // idle granules elsewhere.
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
// driver call of its own, whatever the size. So the free granules of the request's aligned
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
    it->second.stream = {};
    it->second.mapped = true;
    if (virtual_) add_busy(it->first, it->second.size, false);  // still in its run
    make_free(it);
  }
  for (std::size_t i = 0; i < waiting_.size();) {
    auto it = find_block(waiting_[i]);
    const auto& w = it->second.waits;
    if (std::all_of(w.begin(), w.end(), [&](const stream_mark& m) { return clock_.met(m); })) {
      it->second.st = state::ready;
      it->second.stream = {};
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

}  // namespace gpumem::detail
