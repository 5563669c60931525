// What the pool says of itself: its statistics, its blocks, its invariants checked, and what a
// bad free was.
#include <fmt/format.h>

#include <algorithm>
#include <mutex>
#include <stdexcept>
#include <unordered_map>
#include <unordered_set>

#include "pool_impl.hpp"

namespace gpumem {

// Under m: the sum of every front cache's live bytes.
std::size_t pool::impl::exact_live() const {
  detail::all_fronts_locked held(fronts);
  return sum_live();
}

// The same with every front cache's lock already held.
std::size_t pool::impl::sum_live() const {
  std::size_t live = 0;
  for (const auto& f : fronts) live += f->live_bytes;
  return live;
}

// Under m: the misuse a pointer no front cache holds live stands for.
misuse_report pool::impl::classify_unknown(std::uintptr_t a, std::size_t bytes) const {
  misuse_report r{misuse_kind::unknown_pointer, reinterpret_cast<void*>(a), bytes, 0, {}};
  bool cached = false;
  {
    detail::all_fronts_locked held(fronts);
    for (const auto& f : fronts)
      if (const detail::rec_ref* i = f->index.find(a)) cached |= f->recs[i->rec].state == detail::rec_cached;
  }
  if (cached || arena.is_free_block_start(a) || slabs.is_free_slot(a)) {
    r.kind = misuse_kind::double_free;
    r.detail = "gpumem::pool::deallocate: this pointer was already freed";
  } else {
    r.detail = "gpumem::pool::deallocate: not a live allocation of this pool (an interior pointer, or a pointer "
               "of another resource)";
  }
  return r;
}

pool_stats pool::stats() const {
  impl& p = *impl_;
  std::lock_guard lock(p.m);
  pool_stats s = p.st;
  detail::all_fronts_locked held(p.fronts);
  s.live_bytes = p.sum_live();
  s.peak_live_bytes = std::max(p.shared_peak.load(std::memory_order_relaxed), s.live_bytes);
  std::uint64_t hits = 0, fast_frees = 0, refills = 0, evictions = 0;
  for (const auto& f : p.fronts) {
    if (p.fronts.size() == 1) s.peak_live_bytes = std::max(s.peak_live_bytes, f->peak_live);
    hits += f->hits;
    refills += f->refills;
    evictions += f->evictions;
    fast_frees += f->fast_frees;
  }
  s.plan_hits = p.plan.hits();
  s.plans = p.plan.plans_made();
  s.reserved_bytes = p.arena.reserved_bytes();
  s.cached_bytes = s.reserved_bytes > s.live_bytes ? s.reserved_bytes - s.live_bytes : 0;
  s.largest_free_block_bytes = p.arena.largest_free_block();
  s.front_hits = hits;
  s.front_refills = refills;
  s.front_evictions = evictions;
  s.allocations += s.front_hits;
  s.deallocations += fast_frees;
  s.upstream_calls = p.arena.upstream_calls();
  s.upstream_releases = p.arena.upstream_releases();
  s.maps = p.arena.maps();
  s.unmaps = p.arena.unmaps();
  s.remap_ns = p.arena.remap_ns();
  s.remaps_deferred = p.arena.remaps_deferred();
  s.stream_ordered_moves = p.arena.stream_ordered_moves();
  s.driver_maps = p.arena.driver_maps();
  s.driver_unmaps = p.arena.driver_unmaps();
  s.kept_mappings = p.arena.kept_mappings();
  s.map_calls = p.arena.map_calls();
  s.unmap_calls = p.arena.unmap_calls();
  s.events_recorded = p.clock.events_recorded();
  return s;
}

void pool::reset_peaks() {
  impl& p = *impl_;
  std::lock_guard lock(p.m);
  detail::all_fronts_locked held(p.fronts);
  const std::size_t live = p.sum_live();
  p.shared_peak.store(live, std::memory_order_relaxed);
  for (auto& f : p.fronts) f->peak_live = f->live_bytes;
  p.st.peak_live_bytes = live;
  p.st.peak_reserved_bytes = p.arena.reserved_bytes();
}

const pool_options& pool::options() const noexcept { return impl_->opts; }

void pool::check_invariants() const {
  impl& p = *impl_;
  std::lock_guard lock(p.m);
  p.arena.check();
  p.slabs.check();
  auto fail = [](const std::string& what) { throw std::logic_error("pool invariant broken: " + what); };
  // Every arena byte the pool holds live is a caller's block, a cached block or a slab. The front
  // caches are held all at once: one at a time, a block freed between two visits would be counted
  // both live (first visit) and in transit (at the end).
  detail::all_fronts_locked held(p.fronts);
  std::size_t arena_held = p.slabs.slab_total_bytes();
  std::size_t planned = 0;  // blocks the step plan placed, live
  p.plan.check();
  if (p.plan.region()) {
    if (p.arena.live_size(p.plan.region()) < p.plan.region_bytes()) fail("the plan's region is not live in the arena");
    arena_held += p.arena.live_size(p.plan.region());
  }
  std::unordered_set<std::uintptr_t> seen;
  std::unordered_map<const detail::slab*, std::uint32_t> slot_refs;  // slots held live or cached
  auto check_slot = [&](std::uintptr_t a, const detail::slab* sl, std::uint32_t slot, std::size_t bytes) {
    if (a < sl->base || a + bytes > sl->base + sl->bytes) fail(fmt::format("slot {:#x} lies outside its slab", a));
    if (slot >= sl->slots || sl->base + slot * sl->slot_bytes != a) fail(fmt::format("slot {:#x} has the wrong index {}", a, slot));
    ++slot_refs[sl];
  };
  for (const auto& f : p.fronts) {
    std::size_t live = 0, cached_recs = 0;
    if (f->index.size() + f->spare_recs.size() != f->recs.size()) fail("a front cache's records do not add up");
    f->index.for_each([&](std::uintptr_t a, const detail::rec_ref& ref) {
      if (ref.rec >= f->recs.size()) fail(fmt::format("{:#x} indexes no record", a));
      const detail::block_rec& r = f->recs[ref.rec];
      if (r.addr != a) fail(fmt::format("{:#x} indexes the record of {:#x}", a, r.addr));
      if (ref.bin != r.bin) fail(fmt::format("{:#x} is indexed with bin {}, its record's is {}", a, ref.bin, r.bin));
      if (!seen.insert(a).second) fail(fmt::format("{:#x} is held twice", a));
      if (r.bin != detail::bin_of(r.block_bytes)) fail(fmt::format("block {:#x} has the wrong bin", a));
      if (r.sl) {
        check_slot(a, r.sl, r.slot, r.block_bytes);
        if (r.block_bytes != r.sl->slot_bytes) fail(fmt::format("slot {:#x} has the wrong size", a));
      } else if (r.slot) {  // the step plan's (pool_plan.cpp)
        if (!p.plan.region() || !p.plan.in_region(a) || !p.plan.in_region(a + r.block_bytes - 1))
          fail(fmt::format("planned block {:#x} lies outside the plan's region", a));
        if (!r.live()) fail(fmt::format("planned block {:#x} is cached", a));
        ++planned;
      } else {
        if (p.arena.live_size(a) != r.block_bytes) fail(fmt::format("block {:#x} is not live in the arena", a));
        arena_held += r.block_bytes;
      }
      if (r.live()) {
        live += r.bytes;
        if (a % r.alignment()) fail(fmt::format("live block {:#x} breaks its alignment {}", a, r.alignment()));
        if (r.bytes > r.block_bytes) fail(fmt::format("live block {:#x} is smaller than its request", a));
      } else if (r.state == detail::rec_cached) {
        ++cached_recs;
      } else {
        fail(fmt::format("{:#x} indexes an unused record", a));
      }
    });
    if (live != f->live_bytes) fail(fmt::format("front cache live bytes {} != counted {}", f->live_bytes, live));
    std::unordered_set<std::uint32_t> in_bins;
    for (const auto& sb : f->streams) {
      std::size_t held[2] = {0, 0};
      for (std::size_t b = 0; b < sb.bins.size(); ++b) {
        const detail::bin& x = sb.bins[b];
        if (x.count > x.limit) fail("a bin holds more than its limit");
        for (std::uint32_t k = 0; k < x.count; ++k) {
          const std::uint32_t i = x.items[k].rec;
          if (i >= f->recs.size() || f->recs[i].state != detail::rec_cached)
            fail("a bin holds a block that is not cached");
          if (x.items[k].addr != f->recs[i].addr)
            fail(fmt::format("a bin holds {:#x} for block {:#x}", x.items[k].addr, f->recs[i].addr));
          if (!in_bins.insert(i).second) fail(fmt::format("{:#x} is cached twice", f->recs[i].addr));
          if (f->recs[i].bin != b) fail(fmt::format("cached block {:#x} is in the wrong bin", f->recs[i].addr));
          held[sb.budget_of(f->recs[i])] += f->recs[i].block_bytes;
        }
      }
      if (held[0] != sb.held[0] || held[1] != sb.held[1]) fail("a stream's cached bytes are off");
    }
    if (in_bins.size() != cached_recs) fail("a cached block is in no bin");
  }
  // A slot out of its slab is a caller's, a front cache's, or on its way back under m.
  for (const auto& [sl, refs] : slot_refs) {
    std::lock_guard shard_lock(sl->shard.load(std::memory_order_relaxed)->m);
    if (refs > sl->live) fail(fmt::format("slab {:#x}: {} slots held but {} counted live", sl->base, refs, sl->live));
  }
  if (planned + p.plan.poisoned_places() != p.plan.live_blocks())
    fail(fmt::format("{} planned blocks live, the plan counts {}", planned, p.plan.live_blocks()));
  arena_held += p.in_transit_bytes.load(std::memory_order_relaxed);
  if (arena_held != p.arena.allocated_bytes())
    fail(fmt::format("the arena holds {} B live but blocks, cached blocks and slabs add to {} B",
                     p.arena.allocated_bytes(), arena_held));
}

std::vector<block_info> pool::blocks() const {
  impl& p = *impl_;
  std::lock_guard lock(p.m);
  std::unordered_set<std::uintptr_t> cached;
  detail::all_fronts_locked held(p.fronts);
  for (const auto& f : p.fronts) {
    f->index.for_each([&](std::uintptr_t a, const detail::rec_ref& ref) {
      if (f->recs[ref.rec].state == detail::rec_cached && !f->recs[ref.rec].sl) cached.insert(a);
    });
  }
  std::vector<block_info> out;
  p.arena.append_blocks(out);
  for (auto& b : out)
    if (b.st == block_info::state::live && cached.count(b.address)) b.st = block_info::state::cached;
  return out;
}

}  // namespace gpumem
