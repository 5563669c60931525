// CUDA graph capture in the pool (gpumem/graph_pool.hpp): the calls that begin and end a capture,
// and the general paths' detours for a capturing stream. The common allocate and free test one
// figure, captures_underway; while it is 0 nothing here runs but a free of a graph pool's block
// (found under the pool's lock after the front caches, pool.cpp's deallocate_slow).
#include <fmt/format.h>

#include <mutex>

#include "pool_impl.hpp"

namespace gpumem {

void* pool::impl::graph_allocate(std::size_t bytes, std::size_t alignment, stream_ref s) {
  std::lock_guard lock(m);
  const graph_pool_id g = graphs.capturing(s);
  if (!g) return nullptr;
  const std::size_t held = arena.reserved_bytes() + graphs.reserved_bytes();
  const std::size_t room = opts.max_reserved_bytes > held ? opts.max_reserved_bytes - held : 0;
  return reinterpret_cast<void*>(graphs.allocate(g, bytes, alignment, room));
}

bool pool::impl::graph_free_locked(std::uintptr_t a, std::size_t bytes, stream_ref s, misuse_report& bad) noexcept {
  std::size_t expected = 0;
  switch (graphs.deallocate(a, bytes, s, expected)) {
    case detail::graph_pools::freed::not_ours: return false;
    case detail::graph_pools::freed::done: return true;
    case detail::graph_pools::freed::size_mismatch:
      bad.kind = misuse_kind::size_mismatch;
      bad.bytes_expected = expected;
      bad.detail = "gpumem::pool::deallocate: the size given is not the size allocated (a graph pool's block); the "
                   "block is left live";
      return true;
  }
  return false;
}

bool pool::impl::graph_deallocate(void* ptr, std::size_t bytes, std::size_t alignment, stream_ref s) noexcept {
  misuse_report bad{misuse_kind::unknown_pointer, ptr, bytes, 0, {}};
  {
    std::lock_guard lock(m);
    if (!graph_free_locked(reinterpret_cast<std::uintptr_t>(ptr), bytes, s, bad)) {
      if (!graphs.capturing(s)) return false;
      // A block from outside the capture, freed on the capturing stream: its free needs an event
      // on `s` after the graph's work, which only end_capture can record.
      graphs.defer(s, {ptr, bytes, alignment});
      return true;
    }
    if (bad.kind == misuse_kind::unknown_pointer) return true;
  }
  report_misuse(bad);
  return true;
}

graph_pool_id pool::create_graph_pool() {
  std::lock_guard lock(impl_->m);
  return impl_->graphs.create();
}

void pool::begin_capture(stream_ref s, graph_pool_id g) {
  impl& p = *impl_;
  std::lock_guard lock(p.m);
  p.graphs.begin(s, g);
  p.clock.set_capturing(s, true);
  p.captures_underway.store(static_cast<std::uint32_t>(p.graphs.capturing_streams()), std::memory_order_relaxed);
}

void pool::end_capture(stream_ref s) {
  impl& p = *impl_;
  std::vector<detail::deferred_free> later;
  {
    std::lock_guard lock(p.m);
    later = p.graphs.end(s);
    p.clock.set_capturing(s, false);
    p.captures_underway.store(static_cast<std::uint32_t>(p.graphs.capturing_streams()), std::memory_order_relaxed);
  }
  for (const detail::deferred_free& d : later) deallocate(d.ptr, d.bytes, d.alignment, s);
}

void pool::release_graph_pool(graph_pool_id g, stream_ref s) {
  impl& p = *impl_;
  std::lock_guard lock(p.m);
  if (p.graphs.capturing(s))
    throw std::logic_error(fmt::format("gpumem::pool::release_graph_pool: stream {:#x} captures (into graph pool {}); "
                                       "release after end_capture",
                                       s.value(), p.graphs.capturing(s)));
  p.graphs.release(g, s);
}

graph_pool_stats pool::graph_stats(graph_pool_id g) const {
  std::lock_guard lock(impl_->m);
  return impl_->graphs.stats(g);
}

graph_pool_id pool::capture_of(stream_ref s) const {
  std::lock_guard lock(impl_->m);
  return impl_->graphs.capturing(s);
}

}  // namespace gpumem
