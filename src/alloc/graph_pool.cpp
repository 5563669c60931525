// graph_pools: the memory of CUDA graph captures (src/alloc/graph_pool.hpp). Two tiers:
//  - large blocks on a virtual upstream (a granule or more, little lost to rounding): whole
//    granules, mapped at a fresh address; when the block is freed a later block of its size takes
//    the mapping as it is, and one of another size maps its handles again at a fresh address,
//    while the old mapping stays (the graph's earlier kernels use it, and they run before the
//    later ones). Physical memory is then what is live at once, rounded to granules;
//  - everything else: granule-sized chunks (a handle mapped in the pool's range, or a segment of a
//    plain upstream), carved best-fit, free neighbours within a chunk coalesced.
#include "graph_pool.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>

#include "gpumem/errors.hpp"

namespace gpumem::detail {

namespace {
constexpr std::size_t carve_unit = 512;                  // the small tier's step, as PyTorch's
constexpr std::size_t range_floor = std::size_t{1} << 30;  // the least address range reserved at once
}  // namespace

graph_pools::graph_pools(upstream& up, ordering& ord)
    : up_(up), ord_(ord), granule_(up.granularity()), virt_(up.supports_virtual()) {}

graph_pools::~graph_pools() {
  // The pool is destroyed: its callers are done with every block (as with the arena's memory).
  for (auto& [g, p] : pools_) {
    for (auto& [va, m] : p.maps) up_.unmap(reinterpret_cast<void*>(va), m.handles.size() * granule_);
    std::vector<physical_handle> held = p.spare;
    for (auto& [va, m] : p.maps)
      if (m.st != mstate::dead) held.insert(held.end(), m.handles.begin(), m.handles.end());
    for (physical_handle h : held) up_.release_physical(h, granule_);
    for (auto& [base, c] : p.chunks) {
      if (virt_) {
        up_.unmap(reinterpret_cast<void*>(base), c.bytes);
        up_.release_physical(c.h, c.bytes);
      } else {
        up_.free_segment(reinterpret_cast<void*>(base), c.bytes);
      }
    }
    for (auto& [base, n] : p.ranges) up_.release_range(reinterpret_cast<void*>(base), n);
  }
}

graph_pool_id graph_pools::create() {
  const graph_pool_id g = next_id_++;
  pools_.emplace(g, gpool{});
  return g;
}

graph_pools::gpool& graph_pools::find(graph_pool_id g, const char* what) {
  auto it = pools_.find(g);
  if (it == pools_.end())
    throw std::logic_error(fmt::format("gpumem::pool::{}: graph pool {} does not exist (never created, or released "
                                       "and given back)",
                                       what, g));
  return it->second;
}

void graph_pools::begin(stream_ref s, graph_pool_id g) {
  gpool& p = find(g, "begin_capture");
  if (p.released)
    throw std::logic_error(fmt::format("gpumem::pool::begin_capture: graph pool {} was released", g));
  if (auto it = capture_.find(s); it != capture_.end())
    throw std::logic_error(fmt::format("gpumem::pool::begin_capture: stream {:#x} already captures into graph pool "
                                       "{}; end_capture it first",
                                       s.value(), it->second));
  capture_.emplace(s, g);
  ++p.capturing;
}

std::vector<deferred_free> graph_pools::end(stream_ref s) {
  auto it = capture_.find(s);
  if (it == capture_.end())
    throw std::logic_error(
        fmt::format("gpumem::pool::end_capture: stream {:#x} has no capture begun (begin_capture)", s.value()));
  --pools_.at(it->second).capturing;
  capture_.erase(it);
  std::vector<deferred_free> out;
  if (auto d = deferred_.find(s); d != deferred_.end()) {
    out = std::move(d->second);
    deferred_.erase(d);
  }
  return out;
}

void graph_pools::add_reserved(gpool& p, std::ptrdiff_t delta) {
  p.reserved += static_cast<std::size_t>(delta);
  reserved_ += static_cast<std::size_t>(delta);
  p.peak_reserved = std::max(p.peak_reserved, p.reserved);
}

std::uintptr_t graph_pools::take_va(gpool& p, std::size_t bytes) {
  if (p.va_end - p.va_next < bytes) {
    const std::size_t n = std::max(range_floor, align_up(bytes, granule_));
    void* base = up_.reserve_range(n);
    p.ranges.emplace_back(reinterpret_cast<std::uintptr_t>(base), n);
    p.va_next = reinterpret_cast<std::uintptr_t>(base);
    p.va_end = p.va_next + n;
  }
  const std::uintptr_t a = p.va_next;
  p.va_next += bytes;
  return a;
}

void graph_pools::add_free(gpool& p, std::uintptr_t a, std::size_t n) {
  p.free_by_addr.emplace(a, n);
  p.free_by_size.emplace(n, a);
}

void graph_pools::remove_free(gpool& p, std::uintptr_t a, std::size_t n) {
  p.free_by_addr.erase(a);
  p.free_by_size.erase({n, a});
}

std::uintptr_t graph_pools::carve_small(gpool& p, std::size_t block, std::size_t alignment) {
  for (auto it = p.free_by_size.lower_bound({block, 0}); it != p.free_by_size.end(); ++it) {
    const auto [n, a] = *it;
    const std::uintptr_t start = align_up(a, alignment);
    if (start + block > a + n) continue;
    remove_free(p, a, n);
    if (start > a) add_free(p, a, start - a);
    if (start + block < a + n) add_free(p, start + block, a + n - start - block);
    return start;
  }
  return 0;
}

std::uintptr_t graph_pools::new_chunk(gpool& p, std::size_t bytes, std::size_t room) {
  if (bytes > room) return 0;
  std::uintptr_t base;
  chunk c{bytes, 0, {}};
  if (virt_) {
    auto h = up_.create_physical(bytes);
    if (!h) return 0;
    base = take_va(p, bytes);
    try {
      up_.map(reinterpret_cast<void*>(base), bytes, *h);
    } catch (...) {
      up_.release_physical(*h, bytes);
      throw;
    }
    c.h = *h;
  } else {
    void* seg = up_.allocate_segment(bytes);
    if (!seg) return 0;
    base = reinterpret_cast<std::uintptr_t>(seg);
  }
  p.chunks.emplace(base, c);
  add_free(p, base, bytes);
  add_reserved(p, static_cast<std::ptrdiff_t>(bytes));
  return base;
}

std::uintptr_t graph_pools::map_large(gpool& p, std::size_t granules, std::size_t room) {
  // A dormant mapping of this size: taken whole, as it is.
  for (auto& [va, m] : p.maps)
    if (m.st == mstate::dormant && m.handles.size() == granules) {
      m.st = mstate::live;
      return va;
    }
  // Else handles: spares first, then those of dormant mappings (which die), then new ones.
  for (auto it = p.maps.begin(); p.spare.size() < granules && it != p.maps.end(); ++it)
    if (it->second.st == mstate::dormant) {
      p.spare.insert(p.spare.end(), it->second.handles.begin(), it->second.handles.end());
      it->second.st = mstate::dead;
    }
  const std::size_t reuse = std::min(granules, p.spare.size());
  const std::size_t fresh = granules - reuse;
  if (fresh * granule_ > room) return 0;
  std::vector<physical_handle> hs;
  hs.reserve(granules);
  for (std::size_t i = p.spare.size() - reuse; i < p.spare.size(); ++i) hs.push_back(p.spare[i]);
  std::size_t created = 0;
  auto undo = [&] {
    for (std::size_t i = reuse; i < reuse + created; ++i) up_.release_physical(hs[i], granule_);
  };
  for (; created < fresh; ++created) {
    auto h = up_.create_physical(granule_);
    if (!h) {
      undo();
      return 0;
    }
    hs.push_back(*h);
  }
  std::uintptr_t va;
  try {
    va = take_va(p, granules * granule_);
    up_.map_run(reinterpret_cast<void*>(va), granule_, hs.data(), granules);
  } catch (...) {
    undo();
    throw;
  }
  p.spare.resize(p.spare.size() - reuse);
  p.handles += fresh;
  add_reserved(p, static_cast<std::ptrdiff_t>(fresh * granule_));
  p.maps.emplace(va, mapping{std::move(hs), mstate::live});
  return va;
}

std::uintptr_t graph_pools::allocate(graph_pool_id g, std::size_t bytes, std::size_t alignment, std::size_t room) {
  gpool& p = find(g, "allocate");
  const std::size_t whole = align_up(bytes, granule_);
  // Large tier where rounding to granules costs at most a sixteenth of the block.
  const bool large = virt_ && bytes >= granule_ && (whole - bytes) * 16 <= bytes;
  std::uintptr_t a;
  std::size_t block;
  if (large) {
    block = whole;
    a = map_large(p, whole / granule_, room);
    if (!a) throw_oom(p, bytes, alignment, "the upstream or max_reserved_bytes refused the granules");
  } else {
    block = align_up(bytes, carve_unit);
    a = carve_small(p, block, alignment);
    if (!a) {
      if (!new_chunk(p, align_up(block, granule_), room))
        throw_oom(p, bytes, alignment, "the upstream or max_reserved_bytes refused a chunk");
      a = carve_small(p, block, alignment);
    }
  }
  std::uintptr_t owner = 0;
  if (!large) {
    auto c = std::prev(p.chunks.upper_bound(a));
    ++c->second.live;
    owner = c->first;
  }
  live_.emplace(a, live_block{g, bytes, block, owner});
  p.live += bytes;
  p.peak_live = std::max(p.peak_live, p.live);
  ++p.blocks;
  return a;
}

void graph_pools::throw_oom(const gpool& p, std::size_t bytes, std::size_t alignment, std::string why) const {
  oom_report r;
  r.requested_bytes = bytes;
  r.alignment = alignment;
  r.reserved_bytes = p.reserved;
  r.live_bytes = p.live;
  r.cached_bytes = p.reserved > p.live ? p.reserved - p.live : 0;
  r.upstream_said = "graph pool: " + why;
  r.advice = "the capture needs more memory than the device (or max_reserved_bytes) gives its graph pool";
  throw out_of_memory(std::move(r));
}

void graph_pools::wait_for(stream_ref s) {
  const event_ref e = ord_.record(s);
  ord_.synchronize(e);
  ord_.release(e);
}

graph_pools::freed graph_pools::deallocate(std::uintptr_t a, std::size_t bytes, stream_ref s, std::size_t& expected) {
  auto it = live_.find(a);
  if (it == live_.end()) return freed::not_ours;
  const live_block b = it->second;
  if (b.bytes != bytes) {
    expected = b.bytes;
    return freed::size_mismatch;
  }
  gpool& p = pools_.at(b.g);
  if (p.released && capture_.count(s)) {
    // Memory would go back to the upstream after `s`'s work, but `s` captures: after its capture.
    deferred_[s].push_back({reinterpret_cast<void*>(a), bytes, default_alignment});
    return freed::done;
  }
  live_.erase(it);
  p.live -= bytes;
  --p.blocks;
  if (b.chunk == 0) {
    p.maps.at(a).st = mstate::dormant;
  } else {
    --p.chunks.at(b.chunk).live;
    // Coalesce with free neighbours of the same chunk.
    std::uintptr_t start = a;
    std::size_t n = b.block_bytes;
    auto next = p.free_by_addr.find(a + n);
    if (next != p.free_by_addr.end() && std::prev(p.chunks.upper_bound(next->first))->first == b.chunk) {
      const auto [na, nn] = *next;
      remove_free(p, na, nn);
      n += nn;
    }
    auto prev = p.free_by_addr.lower_bound(a);
    if (prev != p.free_by_addr.begin()) {
      --prev;
      const auto [pa, pn] = *prev;
      if (pa + pn == a && pa >= b.chunk) {
        remove_free(p, pa, pn);
        start = pa;
        n += pn;
      }
    }
    add_free(p, start, n);
  }
  if (p.released) {
    wait_for(s);
    give_back_unused(b.g, p);
  }
  return freed::done;
}

void graph_pools::release(graph_pool_id g, stream_ref s) {
  gpool& p = find(g, "release_graph_pool");
  if (p.capturing)
    throw std::logic_error(fmt::format("gpumem::pool::release_graph_pool: {} stream(s) still capture into graph pool "
                                       "{}; end_capture them first",
                                       p.capturing, g));
  if (p.released)
    throw std::logic_error(fmt::format("gpumem::pool::release_graph_pool: graph pool {} was released already", g));
  p.released = true;
  wait_for(s);
  give_back_unused(g, p);
}

void graph_pools::give_back_unused(graph_pool_id g, gpool& p) {
  // Large tier: every mapping no live block holds, then the handles no live mapping holds.
  for (auto it = p.maps.begin(); it != p.maps.end();) {
    if (it->second.st == mstate::live) {
      ++it;
      continue;
    }
    up_.unmap(reinterpret_cast<void*>(it->first), it->second.handles.size() * granule_);
    if (it->second.st == mstate::dormant)
      p.spare.insert(p.spare.end(), it->second.handles.begin(), it->second.handles.end());
    it = p.maps.erase(it);
  }
  for (physical_handle h : p.spare) up_.release_physical(h, granule_);
  add_reserved(p, -static_cast<std::ptrdiff_t>(p.spare.size() * granule_));
  p.handles -= p.spare.size();
  p.spare.clear();
  // Small tier: chunks with no live block.
  for (auto it = p.chunks.begin(); it != p.chunks.end();) {
    if (it->second.live) {
      ++it;
      continue;
    }
    const std::uintptr_t base = it->first;
    const chunk c = it->second;
    remove_free(p, base, c.bytes);  // an empty chunk is one free range
    if (virt_) {
      up_.unmap(reinterpret_cast<void*>(base), c.bytes);
      up_.release_physical(c.h, c.bytes);
    } else {
      up_.free_segment(reinterpret_cast<void*>(base), c.bytes);
    }
    add_reserved(p, -static_cast<std::ptrdiff_t>(c.bytes));
    it = p.chunks.erase(it);
  }
  if (p.chunks.empty() && p.maps.empty()) {
    for (auto& [base, n] : p.ranges) up_.release_range(reinterpret_cast<void*>(base), n);
    pools_.erase(g);
  }
}

graph_pool_stats graph_pools::stats(graph_pool_id g) const {
  auto it = pools_.find(g);
  if (it == pools_.end())
    throw std::logic_error(fmt::format("gpumem::pool::graph_stats: graph pool {} does not exist (never created, or "
                                       "released and given back)",
                                       g));
  const gpool& p = it->second;
  graph_pool_stats s;
  s.reserved_bytes = p.reserved;
  s.peak_reserved_bytes = p.peak_reserved;
  s.live_bytes = p.live;
  s.peak_live_bytes = p.peak_live;
  s.blocks = p.blocks;
  s.mappings = p.maps.size();
  s.capturing_streams = p.capturing;
  s.released = p.released;
  return s;
}

}  // namespace gpumem::detail
