// gpumem::pool: the front of the pool — argument checks, the live-allocation table, statistics and
// the out-of-memory path. Memory comes from the slab cache (small) and the arena (large).
#include "gpumem/pool.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <deque>
#include <mutex>
#include <stdexcept>
#include <unordered_map>
#include <unordered_set>

#include "core/arena.hpp"
#include "core/slab_cache.hpp"
#include "core/stream_clock.hpp"

namespace gpumem {

namespace {
// Past this a size is a bug, not a request: no device has 128 TiB.
constexpr std::size_t absurd_bytes = std::size_t{1} << 47;
// How many freed pointers are remembered to tell a double free from an unknown pointer.
constexpr std::size_t remembered_frees = 4096;
}  // namespace

struct pool::impl {
  struct live_entry {
    std::size_t bytes;       // as requested
    std::size_t alignment;   // as requested
    stream_ref stream;
    detail::slab* sl;        // nullptr: an arena block
  };

  pool_options opts;
  upstream& up;
  mutable std::mutex m;
  detail::stream_clock clock;
  detail::arena arena;
  detail::slab_cache slabs;
  std::unordered_map<std::uintptr_t, live_entry> live;
  std::unordered_map<std::uintptr_t, std::vector<stream_ref>> used_on;  // record_use
  std::unordered_set<std::uintptr_t> recently_freed;
  std::deque<std::uintptr_t> recently_freed_order;
  pool_stats st;

  impl(upstream& u, ordering& o, const pool_options& op)
      : opts(op),
        up(u),
        clock(o),
        arena(u, clock,
              detail::arena_options{op.min_segment_bytes, op.max_reserved_bytes, op.address_range_bytes,
                                    op.release_threshold_bytes}),
        slabs(arena, clock, std::min(op.small_max_bytes, std::size_t{1} << 20)) {}

  void note_reserved() {
    st.reserved_bytes = arena.reserved_bytes();
    st.peak_reserved_bytes = std::max(st.peak_reserved_bytes, st.reserved_bytes);
  }

  // Gives back what the caches hold that the arena could reuse: empty slabs.
  bool reclaim() {
    if (clock.poll()) {
      arena.promote();
      slabs.promote();
    }
    return slabs.release_empty() > 0;
  }

  std::uintptr_t take(std::size_t bytes, std::size_t alignment, stream_ref s, detail::slab*& sl, std::string& why) {
    const bool small = bytes <= slabs.small_max() && alignment <= detail::class_unit;
    const std::size_t cls = small ? detail::size_class_of(bytes) : 0;
    const std::size_t size = align_up(bytes, detail::arena::unit);
    auto attempt = [&](bool may_grow) -> std::uintptr_t {
      if (small) return slabs.allocate(cls, s, may_grow, sl);
      sl = nullptr;
      return arena.allocate(size, alignment, s, may_grow, &why);
    };
    // First without growing: cached memory, spares, idle granules. Then give back empty slabs
    // and try again, and only then ask the upstream for more.
    std::uintptr_t a = attempt(false);
    if (!a) {
      reclaim();
      a = attempt(true);
    }
    if (!a) {
      // Last resort: every stream's frees waited for, everything cached handed back.
      clock.cover_all();
      clock.wait_all();
      arena.promote();
      slabs.promote();
      slabs.release_empty();
      arena.release(0);
      a = attempt(true);
    }
    return a;
  }

  [[noreturn]] void throw_oom(std::size_t bytes, std::size_t alignment, stream_ref s, std::string why) {
    ++st.failed_allocations;
    // A failed attempt may have taken physical granules it then kept as spares: reserved can
    // grow on this path too, and the peak must see it (else stats() shows peak < current).
    note_reserved();
    oom_report r;
    r.requested_bytes = bytes;
    r.alignment = alignment;
    r.stream = s;
    r.reserved_bytes = arena.reserved_bytes();
    r.live_bytes = st.live_bytes;
    r.cached_bytes = r.reserved_bytes > r.live_bytes ? r.reserved_bytes - r.live_bytes : 0;
    r.largest_free_block_bytes = arena.largest_free_block();
    r.limit_bytes = opts.max_reserved_bytes == SIZE_MAX ? 0 : opts.max_reserved_bytes;
    r.cached_per_stream = arena.owned_free_per_stream();
    r.fragmentation = r.live_bytes ? double(r.reserved_bytes) / double(r.live_bytes) : 0.0;
    r.upstream_said = std::move(why);
    std::size_t stream_held = 0;
    for (const auto& c : r.cached_per_stream) stream_held += c.bytes;
    if (r.limit_bytes && r.reserved_bytes + bytes > r.limit_bytes)
      r.advice = "the pool's own limit stops it: raise pool_options::max_reserved_bytes, or free memory";
    else if (stream_held >= bytes)
      r.advice = "memory freed on other streams is still waiting for their work: synchronize those streams, "
                 "or free blocks on the stream that will reuse them";
    else if (r.cached_bytes >= bytes)
      r.advice = fmt::format("the pool caches {} B it could not shape into this request (fragmentation {:.3f}): "
                             "call trim(), lower release_threshold_bytes, or use the virtual-memory upstream "
                             "so free granules can be remapped",
                             r.cached_bytes, r.fragmentation);
    else
      r.advice = "live memory alone fills the device: free tensors, shrink the batch, or use a larger device";
    throw out_of_memory(std::move(r));
  }
};

pool::pool(upstream& up, ordering& ord, pool_options opts) : impl_(std::make_unique<impl>(up, ord, opts)) {}
pool::~pool() = default;

void* pool::allocate(std::size_t bytes, std::size_t alignment, stream_ref s) {
  if (!is_power_of_two(alignment))
    throw std::invalid_argument(fmt::format("gpumem::pool::allocate: alignment {} is not a power of two", alignment));
  const std::size_t granule = impl_->up.granularity();
  if (alignment > granule)
    throw std::invalid_argument(fmt::format(
        "gpumem::pool::allocate: alignment {} is over the {} B granule, the most the pool honours", alignment, granule));
  if (bytes > absurd_bytes)
    throw std::invalid_argument(fmt::format("gpumem::pool::allocate: {} bytes is not a plausible request (over 2^47)", bytes));
  if (bytes == 0) return nullptr;
  alignment = std::max(alignment, default_alignment);

  impl& p = *impl_;
  std::lock_guard lock(p.m);
  detail::slab* sl = nullptr;
  std::string why;
  std::uintptr_t a = p.take(bytes, alignment, s, sl, why);
  if (!a) p.throw_oom(bytes, alignment, s, std::move(why));
  p.live.emplace(a, impl::live_entry{bytes, alignment, s, sl});
  if (!p.recently_freed.empty() && p.recently_freed.erase(a)) {
    auto pos = std::find(p.recently_freed_order.begin(), p.recently_freed_order.end(), a);
    if (pos != p.recently_freed_order.end()) p.recently_freed_order.erase(pos);
  }
  p.st.live_bytes += bytes;
  p.st.peak_live_bytes = std::max(p.st.peak_live_bytes, p.st.live_bytes);
  ++p.st.allocations;
  p.note_reserved();
  return reinterpret_cast<void*>(a);
}

void pool::deallocate(void* ptr, std::size_t bytes, std::size_t alignment, stream_ref s) noexcept {
  if (!ptr) return;
  impl& p = *impl_;
  misuse_report bad{misuse_kind::unknown_pointer, ptr, bytes, 0, {}};
  {
    std::lock_guard lock(p.m);
    const auto a = reinterpret_cast<std::uintptr_t>(ptr);
    auto it = p.live.find(a);
    if (it == p.live.end()) {
      if (p.recently_freed.count(a)) {
        bad.kind = misuse_kind::double_free;
        bad.detail = "gpumem::pool::deallocate: this pointer was already freed";
      } else {
        bad.detail = "gpumem::pool::deallocate: not a live allocation of this pool (an interior pointer, a pointer "
                     "of another resource, or freed long ago)";
      }
    } else if (it->second.bytes != bytes) {
      bad.kind = misuse_kind::size_mismatch;
      bad.bytes_expected = it->second.bytes;
      bad.detail = "gpumem::pool::deallocate: the size given is not the size allocated; the block is left live";
    } else if (alignment > it->second.alignment || !is_power_of_two(alignment)) {
      bad.kind = misuse_kind::alignment_mismatch;
      bad.bytes_expected = it->second.bytes;
      bad.detail = fmt::format("gpumem::pool::deallocate: alignment {} given, {} allocated; the block is left live",
                               alignment, it->second.alignment);
    } else {
      std::vector<stream_ref> also;
      if (auto u = p.used_on.find(a); u != p.used_on.end()) {
        also = std::move(u->second);
        p.used_on.erase(u);
      }
      if (it->second.sl) {
        p.slabs.deallocate(it->second.sl, a, s, also);
      } else {
        p.arena.deallocate(a, s, also);
        p.note_reserved();
      }
      p.st.live_bytes -= it->second.bytes;
      ++p.st.deallocations;
      p.live.erase(it);
      p.recently_freed.insert(a);
      p.recently_freed_order.push_back(a);
      if (p.recently_freed_order.size() > remembered_frees) {
        p.recently_freed.erase(p.recently_freed_order.front());
        p.recently_freed_order.pop_front();
      }
      return;
    }
  }
  report_misuse(bad);  // outside the lock: a handler may look at the pool
}

void pool::record_use(void* ptr, stream_ref s) {
  impl& p = *impl_;
  std::lock_guard lock(p.m);
  const auto a = reinterpret_cast<std::uintptr_t>(ptr);
  auto it = p.live.find(a);
  if (it == p.live.end())
    throw std::invalid_argument(fmt::format("gpumem::pool::record_use: {} is not a live allocation of this pool", ptr));
  if (s == it->second.stream) return;
  auto& v = p.used_on[a];
  if (std::find(v.begin(), v.end(), s) == v.end()) v.push_back(s);
}

void pool::trim() {
  impl& p = *impl_;
  std::lock_guard lock(p.m);
  p.clock.cover_all();
  p.clock.wait_all();
  p.arena.promote();
  p.slabs.promote();
  p.slabs.release_empty();
  p.arena.release(0);
  p.note_reserved();
}

pool_stats pool::stats() const {
  impl& p = *impl_;
  std::lock_guard lock(p.m);
  pool_stats s = p.st;
  s.reserved_bytes = p.arena.reserved_bytes();
  s.cached_bytes = s.reserved_bytes > s.live_bytes ? s.reserved_bytes - s.live_bytes : 0;
  s.largest_free_block_bytes = p.arena.largest_free_block();
  s.upstream_calls = p.arena.upstream_calls();
  s.upstream_releases = p.arena.upstream_releases();
  s.maps = p.arena.maps();
  s.unmaps = p.arena.unmaps();
  s.events_recorded = p.clock.events_recorded();
  return s;
}

void pool::reset_peaks() {
  impl& p = *impl_;
  std::lock_guard lock(p.m);
  p.st.peak_live_bytes = p.st.live_bytes;
  p.st.peak_reserved_bytes = p.arena.reserved_bytes();
}

const pool_options& pool::options() const noexcept { return impl_->opts; }

void pool::check_invariants() const {
  impl& p = *impl_;
  std::lock_guard lock(p.m);
  p.arena.check();
  p.slabs.check();
  std::size_t live = 0;
  for (const auto& [a, e] : p.live) {
    live += e.bytes;
    if (a % e.alignment) throw std::logic_error(fmt::format("live block {:#x} breaks its alignment {}", a, e.alignment));
    if (!e.sl && p.arena.live_size(a) < e.bytes) throw std::logic_error(fmt::format("live block {:#x} is not live in the arena", a));
    if (e.sl && (a < e.sl->base || a + e.bytes > e.sl->base + e.sl->bytes))
      throw std::logic_error(fmt::format("live slot {:#x} lies outside its slab", a));
  }
  if (live != p.st.live_bytes) throw std::logic_error(fmt::format("live bytes {} != counted {}", p.st.live_bytes, live));
  if (p.arena.reserved_bytes() < p.arena.allocated_bytes()) throw std::logic_error("reserved is below what the arena has live");
}

std::vector<block_info> pool::blocks() const {
  impl& p = *impl_;
  std::lock_guard lock(p.m);
  std::vector<block_info> out;
  p.arena.append_blocks(out);
  return out;
}

}  // namespace gpumem
