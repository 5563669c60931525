// What the arena says of itself: its largest free block, what each stream owns, its blocks for
// segment maps, and the check of every invariant it keeps.
#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <stdexcept>

#include "arena.hpp"

namespace gpumem::detail {

// Ready blocks in the index on a virtual upstream are mapped ones, and owned blocks are always
// mapped: the largest of them is the largest mapped free block, as pool_stats documents.
std::size_t arena::largest_free_block() const {
  std::size_t best = ready_.empty() ? 0 : ready_.rbegin()->first;
  ready_list_.for_each([&](std::uintptr_t, const block& b) { best = std::max(best, b.size); });
  for (const auto& [s, o] : owned_) for_each_owned(o, [&](std::uintptr_t, const block& b) { best = std::max(best, b.size); });
  return best;
}

std::size_t arena::live_granule_bytes() const {
  if (!virtual_) return allocated_;
  std::size_t granules = 0, covered_to = 0;  // granules counted, and the first granule not yet
  for (const auto& [a, b] : blocks_) {
    if (b.st != state::live) continue;
    const std::size_t g0 = std::max(granule_of(a), covered_to), g1 = granule_of(a + b.size - 1) + 1;
    if (g1 > g0) granules += g1 - g0;
    covered_to = std::max(covered_to, g1);
  }
  return granules * granule_;
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
    if (o.empty()) fail(fmt::format("stream {:#x} has an empty owned index", s.value()));
    if (!virtual_ && o.list.head) fail(fmt::format("the owned blocks of stream {:#x} are in a list on a plain upstream", s.value()));
    check_list(o.list, fmt::format("the owned list of stream {:#x}", s.value()),
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
