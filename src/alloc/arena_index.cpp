// The arena's best-fit index: blocks in address order, free blocks by kind (ready mapped, ready
// unmapped, owned by a stream), runs of free blocks by start and by size, and the place search
// over them. Splitting, coalescing, carving a request out of a run, busy bytes per granule.
#include <algorithm>

#include "arena.hpp"

namespace gpumem::detail {

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
    it = emplace_block_before(std::next(it), a, block{end - a, it->second.segment, state::ready, !mapped, {}, 0, {}});
  }
  if (end > e) {
    auto tail = emplace_block_before(std::next(it), e, block{end - e, it->second.segment, state::ready, !mapped, {}, 0, {}});
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

}  // namespace gpumem::detail
