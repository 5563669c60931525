#include "core/arena.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>

namespace gpumem::detail {
namespace {
constexpr std::size_t kTerabyte = std::size_t{1} << 40;
void set_why(std::string* why, std::string text) {
  if (why) *why = std::move(text);
}
}  // namespace

arena::arena(upstream& up, stream_clock& clock, arena_options opts)
    : up_(up), clock_(clock), opts_(opts), virtual_(up.supports_virtual()), granule_(up.granularity()) {
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
  busy_.assign(granules, 0);
  auto it = blocks_.emplace(range_base_, block{range_bytes_, 0, state::ready, 0, 0, {}}).first;
  index_insert(it);
}

arena::~arena() {
  if (virtual_) {
    for (std::size_t g = 0; g < granule_handle_.size(); ++g) {
      if (granule_handle_[g].value == 0) continue;
      up_.unmap(reinterpret_cast<void*>(range_base_ + g * granule_), granule_);
      up_.release_physical(granule_handle_[g], granule_);
    }
    for (auto h : spares_) up_.release_physical(h, granule_);
    up_.release_range(reinterpret_cast<void*>(range_base_), range_bytes_);
  } else {
    for (auto& s : segments_)
      if (s.alive) up_.free_segment(reinterpret_cast<void*>(s.base), s.size);
  }
}

arena::free_index& arena::index_of(const block& b) {
  return b.st == state::ready ? ready_ : owned_[b.stream];
}
void arena::index_insert(block_map::iterator it) { index_of(it->second).emplace(it->second.size, it->first); }
void arena::index_erase(block_map::iterator it) {
  auto& idx = index_of(it->second);
  idx.erase({it->second.size, it->first});
  if (it->second.st == state::owned && idx.empty()) owned_.erase(it->second.stream);
}

// Merges a free block (not in an index) with free neighbours of the same kind; returns the merged
// block, still not in an index.
arena::block_map::iterator arena::coalesce(block_map::iterator it) {
  auto same_kind = [&](const block& a, const block& b) {
    if (a.segment != b.segment || a.st != b.st) return false;
    return a.st == state::ready || (a.st == state::owned && a.stream == b.stream);
  };
  if (it != blocks_.begin()) {
    auto prev = std::prev(it);
    if (same_kind(prev->second, it->second)) {
      index_erase(prev);
      prev->second.size += it->second.size;
      prev->second.seq = std::max(prev->second.seq, it->second.seq);
      blocks_.erase(it);
      it = prev;
    }
  }
  auto next = std::next(it);
  if (next != blocks_.end() && same_kind(it->second, next->second)) {
    index_erase(next);
    it->second.size += next->second.size;
    it->second.seq = std::max(it->second.seq, next->second.seq);
    blocks_.erase(next);
  }
  return it;
}

void arena::make_free(block_map::iterator it) { index_insert(coalesce(it)); }

arena::block_map::iterator arena::find_fit(free_index& idx, std::size_t size, std::size_t alignment) {
  auto c = idx.lower_bound({size, 0});
  if (alignment <= unit) return c == idx.end() ? blocks_.end() : blocks_.find(c->second);
  // Best fit that can also place an aligned start: look at a few candidates in size order, then
  // fall back to one big enough for any placement.
  for (int tries = 0; c != idx.end() && tries < 32; ++c, ++tries) {
    std::size_t pad = align_up(c->second, alignment) - c->second;
    if (c->first >= size + pad) return blocks_.find(c->second);
  }
  c = idx.lower_bound({size + alignment - unit, 0});
  return c == idx.end() ? blocks_.end() : blocks_.find(c->second);
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
  auto it = blocks_.emplace(base, block{seg, static_cast<std::uint32_t>(segments_.size() - 1), state::ready, 0, 0, {}}).first;
  index_insert(it);
  return true;
}

std::uintptr_t arena::allocate(std::size_t size, std::size_t alignment, stream_ref s, bool may_grow, std::string* why) {
  block_map::iterator it = blocks_.end();
  bool covered = false, waited = false, released = false;
  for (;;) {
    auto mine = owned_.find(s);
    auto a = mine == owned_.end() ? blocks_.end() : find_fit(mine->second, size, alignment);
    auto b = find_fit(ready_, size, alignment);
    it = a;
    if (b != blocks_.end() && (a == blocks_.end() || b->second.size < a->second.size)) it = b;
    if (it != blocks_.end()) break;
    if (virtual_) {
      set_why(why, "the reserved address range is exhausted");
      return 0;
    }
    // Plain upstream: memory other streams freed may be ready by now; then grow; then wait.
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

  // Carve [start, start + size) out of the chosen free block. On a virtual upstream the best fit
  // by address may need a granule that cannot be had while a placement at the top of the mapped
  // range (where the last granule is partly mapped, and where the granules the best fit would
  // have pinned stay idle for harvesting) can: when mapping fails, try the top block once.
  std::uintptr_t start = align_up(it->first, alignment);
  if (virtual_) choose_placement(it, start, size, alignment);
  for (bool tried_top = false;; tried_top = true) {
    const state was = it->second.st;
    const stream_ref owner = it->second.stream;
    const std::uint64_t seq = it->second.seq;
    const std::uint32_t segment = it->second.segment;
    index_erase(it);
    if (start != it->first) {
      std::size_t pad = start - it->first;
      std::size_t rest = it->second.size - pad;
      it->second.size = pad;
      index_insert(it);
      it = blocks_.emplace(start, block{rest, segment, was, owner, seq, {}}).first;
    }
    if (it->second.size > size) {
      auto tail = blocks_.emplace(start + size, block{it->second.size - size, segment, was, owner, seq, {}}).first;
      index_insert(tail);
      it->second.size = size;
    }
    it->second.st = state::live;
    it->second.stream = s;
    if (virtual_) {
      if (was == state::ready) add_busy(start, size, true);
      if (!ensure_mapped(start, size, may_grow, why)) {
        if (was == state::ready) add_busy(start, size, false);
        it->second.st = was;
        it->second.stream = owner;
        it->second.seq = seq;
        make_free(it);
        auto top = std::prev(blocks_.end());
        const std::uintptr_t top_start = align_up(top->first, alignment);
        if (!tried_top && top->second.st == state::ready && top_start != start &&
            top->first + top->second.size == range_base_ + range_bytes_ && top->second.size >= size + (top_start - top->first)) {
          it = top;
          start = top_start;
          continue;
        }
        return 0;
      }
      high_water_ = std::max(high_water_, start + size - range_base_);
    }
    allocated_ += size;
    return start;
  }
}

std::size_t arena::unmapped_granules(std::uintptr_t a, std::size_t n) const {
  std::size_t count = 0;
  for (std::size_t g = (a - range_base_) / granule_; range_base_ + g * granule_ < a + n; ++g)
    count += granule_handle_[g].value == 0;
  return count;
}

// Best fit chooses the hole; this chooses where in it, and among the next few holes of its size
// class, the block goes: the place that needs the fewest granules mapped. Putting a block against
// a live neighbour shares that neighbour's partly used granule instead of starting a new one;
// it can only lower the granules a request maps (design notes).
void arena::choose_placement(block_map::iterator& it, std::uintptr_t& start, std::size_t size, std::size_t alignment) {
  free_index& idx = index_of(it->second);
  auto c = idx.find({it->second.size, it->first});
  std::size_t best_cost = SIZE_MAX;
  for (int k = 0; c != idx.end() && k < 4; ++c, ++k) {
    const std::uintptr_t lo = c->second, hi = c->second + c->first;
    const std::uintptr_t first = align_up(lo, alignment);
    if (first + size > hi) continue;
    const std::uintptr_t last = (hi - size) & ~static_cast<std::uintptr_t>(alignment - 1);
    for (std::uintptr_t at : {first, last}) {
      const std::size_t cost = unmapped_granules(at, size);
      if (cost < best_cost) {
        best_cost = cost;
        start = at;
        it = blocks_.find(c->second);
      }
      if (cost == 0) return;
    }
  }
}

void arena::add_busy(std::uintptr_t a, std::size_t n, bool add) {
  std::uintptr_t end = a + n;
  for (std::size_t g = (a - range_base_) / granule_; range_base_ + g * granule_ < end; ++g) {
    std::uintptr_t gs = range_base_ + g * granule_;
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

void arena::harvest_one(std::size_t g, std::vector<physical_handle>& into) {
  up_.unmap(reinterpret_cast<void*>(range_base_ + g * granule_), granule_);
  into.push_back(granule_handle_[g]);
  granule_handle_[g] = physical_handle{0};
  idle_.erase(g);
  --mapped_;
  ++unmaps_;
}

bool arena::take_physical(std::size_t count, bool may_grow, std::vector<physical_handle>& got, std::string* why) {
  bool covered = false, waited = false;
  auto fail = [&](std::string text) {
    spares_.insert(spares_.end(), got.begin(), got.end());
    got.clear();
    set_why(why, std::move(text));
    return false;
  };
  while (got.size() < count) {
    if (!spares_.empty()) {
      got.push_back(spares_.back());
      spares_.pop_back();
      continue;
    }
    if (!idle_.empty()) {
      // Same physical memory, mapped where it is needed now: no growth, no copy.
      harvest_one(*idle_.rbegin(), got);
      continue;
    }
    if (!covered) {
      covered = true;
      clock_.cover_all();
      if (clock_.poll()) {
        promote();
        continue;
      }
    }
    if (!may_grow) return fail("growth needed");
    const bool over_limit = reserved_bytes() + (got.size() + 1) * granule_ > opts_.max_reserved_bytes;
    std::optional<physical_handle> h;
    if (!over_limit) {
      h = up_.create_physical(granule_);
      ++upstream_calls_;
    }
    if (h) {
      got.push_back(*h);
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

bool arena::ensure_mapped(std::uintptr_t a, std::size_t n, bool may_grow, std::string* why) {
  std::vector<std::size_t> missing;
  for (std::size_t g = (a - range_base_) / granule_; range_base_ + g * granule_ < a + n; ++g)
    if (granule_handle_[g].value == 0) missing.push_back(g);
  if (missing.empty()) return true;
  std::vector<physical_handle> got;
  if (!take_physical(missing.size(), may_grow, got, why)) return false;
  for (std::size_t i = 0; i < missing.size(); ++i) {
    const std::size_t g = missing[i];
    try {
      up_.map(reinterpret_cast<void*>(range_base_ + g * granule_), granule_, got[i]);
    } catch (...) {
      spares_.insert(spares_.end(), got.begin() + static_cast<std::ptrdiff_t>(i), got.end());
      throw;
    }
    granule_handle_[g] = got[i];
    ++mapped_;
    ++maps_;
  }
  return true;
}

bool arena::deallocate(std::uintptr_t addr, stream_ref s, const std::vector<stream_ref>& also_on) {
  auto it = blocks_.find(addr);
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
    make_free(it);
  }
  if (opts_.release_threshold_bytes != SIZE_MAX && reserved_bytes() - allocated_ > opts_.release_threshold_bytes)
    release(opts_.release_threshold_bytes);
  return true;
}

std::size_t arena::live_size(std::uintptr_t addr) const {
  auto it = blocks_.find(addr);
  return it == blocks_.end() || it->second.st != state::live ? 0 : it->second.size;
}

bool arena::is_free_block_start(std::uintptr_t addr) const {
  auto it = blocks_.find(addr);
  return it != blocks_.end() && it->second.st != state::live;
}

void arena::promote() {
  std::vector<std::uintptr_t> turning;
  for (auto& [s, idx] : owned_) {
    const std::uint64_t done = clock_.completed(s);
    if (done == 0) continue;
    for (const auto& [size, addr] : idx)
      if (blocks_.at(addr).seq <= done) turning.push_back(addr);
  }
  for (std::uintptr_t addr : turning) {
    auto it = blocks_.find(addr);
    index_erase(it);
    it->second.st = state::ready;
    it->second.stream = 0;
    if (virtual_) add_busy(it->first, it->second.size, false);
    make_free(it);
  }
  for (std::size_t i = 0; i < waiting_.size();) {
    auto it = blocks_.find(waiting_[i]);
    const auto& w = it->second.waits;
    if (std::all_of(w.begin(), w.end(), [&](const stream_mark& m) { return clock_.met(m); })) {
      it->second.st = state::ready;
      it->second.stream = 0;
      it->second.waits.clear();
      if (virtual_) add_busy(it->first, it->second.size, false);
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
  if (moved) promote();
  auto cached = [&] { return reserved_bytes() - allocated_; };
  if (virtual_) {
    while (cached() > keep_cached && !spares_.empty()) {
      up_.release_physical(spares_.back(), granule_);
      spares_.pop_back();
      ++upstream_releases_;
    }
    while (cached() > keep_cached && !idle_.empty()) {
      std::vector<physical_handle> one;
      harvest_one(*idle_.rbegin(), one);
      up_.release_physical(one.front(), granule_);
      ++upstream_releases_;
    }
    return;
  }
  for (std::size_t i = 0; i < segments_.size() && cached() > keep_cached; ++i) {
    auto& seg = segments_[i];
    if (!seg.alive) continue;
    auto it = blocks_.find(seg.base);
    if (it == blocks_.end() || it->second.st != state::ready || it->second.size != seg.size) continue;
    index_erase(it);
    blocks_.erase(it);
    up_.free_segment(reinterpret_cast<void*>(seg.base), seg.size);
    seg.alive = false;
    segment_bytes_ -= seg.size;
    ++upstream_releases_;
  }
}

std::size_t arena::reserved_bytes() const noexcept {
  return virtual_ ? (mapped_ + spares_.size()) * granule_ : segment_bytes_;
}

std::size_t arena::largest_free_block() const {
  std::size_t best = 0;
  // On a virtual upstream a free block may lie over unmapped granules (harvested, released, or
  // the untouched top of the range): that is address space, not memory. Count the longest run of
  // the block that is mapped, as pool_stats documents ("largest mapped free block").
  auto mapped_run = [&](std::uintptr_t a, std::size_t n) {
    std::size_t longest = 0, run = 0;
    for (std::uintptr_t x = a; x < a + n;) {
      const std::size_t g = (x - range_base_) / granule_;
      const std::uintptr_t ge = std::min<std::uintptr_t>(a + n, range_base_ + (g + 1) * granule_);
      run = granule_handle_[g].value ? run + (ge - x) : 0;
      longest = std::max(longest, run);
      x = ge;
    }
    return longest;
  };
  auto consider = [&](const free_index& idx) {
    for (auto it = idx.rbegin(); it != idx.rend() && it->first > best; ++it) {
      if (!virtual_) {
        best = it->first;
        break;
      }
      // The untouched top of the range is never mapped past the high-water mark: clip it.
      std::size_t n = std::min<std::size_t>(it->first, range_base_ + align_up(high_water_, granule_) > it->second
                                                           ? range_base_ + align_up(high_water_, granule_) - it->second
                                                           : 0);
      best = std::max(best, mapped_run(it->second, n));
    }
  };
  consider(ready_);
  for (const auto& [s, idx] : owned_) consider(idx);
  return best;
}

std::vector<oom_report::stream_cache> arena::owned_free_per_stream() const {
  std::vector<oom_report::stream_cache> out;
  for (const auto& [s, idx] : owned_) {
    std::size_t bytes = 0;
    for (const auto& [size, addr] : idx) bytes += size;
    out.push_back({s, bytes});
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.stream < b.stream; });
  return out;
}

void arena::append_blocks(std::vector<block_info>& out) const {
  for (const auto& [addr, b] : blocks_) {
    block_info bi{addr, b.size, block_info::state::cached, b.stream, b.segment};
    if (b.st == state::live) {
      bi.st = block_info::state::live;
      out.push_back(bi);
      continue;
    }
    if (!virtual_) {
      out.push_back(bi);
      continue;
    }
    // Split a free range into its mapped and unmapped runs; stop at the high-water mark.
    std::uintptr_t end = std::min<std::uintptr_t>(addr + b.size, range_base_ + align_up(high_water_, granule_));
    std::uintptr_t x = addr;
    while (x < end) {
      std::size_t g = (x - range_base_) / granule_;
      bool mapped = granule_handle_[g].value != 0;
      std::uintptr_t run_end = x;
      while (run_end < end && (granule_handle_[(run_end - range_base_) / granule_].value != 0) == mapped)
        run_end = std::min<std::uintptr_t>(end, range_base_ + ((run_end - range_base_) / granule_ + 1) * granule_);
      out.push_back({x, run_end - x, mapped ? block_info::state::cached : block_info::state::unmapped, b.stream, b.segment});
      x = run_end;
    }
  }
}

void arena::check() const {
  auto fail = [](const std::string& what) { throw std::logic_error("arena invariant broken: " + what); };
  std::size_t allocated = 0, ready_count = 0, owned_count = 0;
  std::vector<std::uint64_t> busy(busy_.size(), 0);
  std::uintptr_t expect = 0;
  std::uint32_t seg = UINT32_MAX;
  const block* prev = nullptr;
  for (const auto& [addr, b] : blocks_) {
    if (b.size == 0 || b.size % unit) fail(fmt::format("block {:#x} has size {}", addr, b.size));
    if (b.segment != seg) {
      if (prev && expect != segments_[seg].base + segments_[seg].size) fail("a segment is not tiled to its end");
      seg = b.segment;
      if (!segments_.at(seg).alive || addr != segments_[seg].base) fail(fmt::format("block {:#x} does not start its segment", addr));
      prev = nullptr;
    } else if (addr != expect) {
      fail(fmt::format("gap or overlap at {:#x} (expected {:#x})", addr, expect));
    }
    expect = addr + b.size;
    if (prev && prev->st == b.st && (b.st == state::ready || (b.st == state::owned && prev->stream == b.stream)))
      fail(fmt::format("free neighbours at {:#x} were not coalesced", addr));
    switch (b.st) {
      case state::live: allocated += b.size; break;
      case state::ready:
        ++ready_count;
        if (!ready_.count({b.size, addr})) fail(fmt::format("ready block {:#x} missing from the index", addr));
        break;
      case state::owned: {
        ++owned_count;
        auto o = owned_.find(b.stream);
        if (o == owned_.end() || !o->second.count({b.size, addr})) fail(fmt::format("owned block {:#x} missing from the index", addr));
        break;
      }
      case state::waiting: break;
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
  if (allocated != allocated_) fail(fmt::format("allocated bytes {} != counted {}", allocated_, allocated));
  if (ready_count != ready_.size()) fail("the ready index holds blocks that are not ready");
  std::size_t owned_indexed = 0;
  for (const auto& [s, idx] : owned_) owned_indexed += idx.size();
  if (owned_count != owned_indexed) fail("an owned index holds blocks that are not owned");
  if (virtual_) {
    std::size_t mapped = 0;
    for (std::size_t g = 0; g < busy_.size(); ++g) {
      const bool is_mapped = granule_handle_[g].value != 0;
      mapped += is_mapped;
      if (busy[g] != busy_[g]) fail(fmt::format("granule {} busy bytes {} != counted {}", g, busy_[g], busy[g]));
      if (busy_[g] && !is_mapped) fail(fmt::format("granule {} is in use but not mapped", g));
      if (is_mapped && !busy_[g] && !idle_.count(g)) fail(fmt::format("granule {} is idle but not listed", g));
      if ((!is_mapped || busy_[g]) && idle_.count(g)) fail(fmt::format("granule {} is listed idle but is not", g));
    }
    if (mapped != mapped_) fail("mapped granule count is off");
  }
}

}  // namespace gpumem::detail
