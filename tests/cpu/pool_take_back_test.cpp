// Growing first, before the pool grows for a large request it takes back the large blocks another
// thread's front cache keeps for the request's stream (pool.cpp, take_back_others). PyTorch's
// backward pass runs on a thread of its own and frees there the activations the next forward pass
// asks for on the main thread: without this, those blocks stayed in the backward thread's cache
// and the main thread grew beside them (as a live ResNet run replayed on its two recorded threads
// shows).
#include <gtest/gtest.h>

#include <semaphore>
#include <thread>
#include <vector>

#include "support/pool_model.hpp"

namespace {

using namespace gpumem;
using gpumem::test::MiB;
using gpumem::test::sim_pool_rig;

// Eight shapes of 16-23 MiB.
std::vector<std::size_t> shapes() {
  std::vector<std::size_t> v;
  for (std::size_t k = 0; k < 8; ++k) v.push_back((16 + k) * MiB + 256);
  return v;
}

// A second thread allocates and frees every shape on `theirs` (its front cache keeps them all,
// within the reserve headroom) and stays alive while `on_main` runs on this thread; then asks for
// the shapes again. Returns how many of those its front cache served.
template <class F>
std::uint64_t with_blocks_cached_by_another_thread(sim_pool_rig& r, stream_ref theirs, F&& on_main) {
  std::binary_semaphore cached{0}, done{0};
  std::uint64_t hits_after = 0;
  std::thread other([&] {
    std::vector<void*> held;
    for (std::size_t n : shapes()) held.push_back(r.allocate(n, default_alignment, theirs));
    for (void* p : held) r.deallocate(p, theirs);
    cached.release();
    done.acquire();  // its front cache must outlive on_main: a thread's end empties it
    const std::uint64_t before = r.p->stats().front_hits;
    held.clear();
    for (std::size_t n : shapes()) held.push_back(r.allocate(n, default_alignment, theirs));
    hits_after = r.p->stats().front_hits - before;
    for (void* p : held) r.deallocate(p, theirs);
  });
  cached.acquire();
  on_main();
  done.release();
  other.join();
  return hits_after;
}

sim_pool_rig grow_first_rig() {
  detail::pool_config po;
  po.grow_before_reclaim = true;
  return sim_pool_rig(sim_options{.capacity_bytes = std::size_t{2} << 30, .auto_complete = true}, po);
}

TEST(TakeBack, AnotherThreadsCachedBlocksServeThisThreadBeforeGrowth) {
  auto r = grow_first_rig();
  const std::uint64_t their_hits = with_blocks_cached_by_another_thread(r, stream_ref{}, [&] {
    const pool_stats before = r.p->stats();
    ASSERT_GE(before.cached_bytes, 8 * 16 * MiB) << "the other thread's front cache keeps its blocks";
    std::vector<void*> held;
    for (std::size_t n : shapes()) held.push_back(r.allocate(n, default_alignment, stream_ref{}));
    EXPECT_EQ(r.p->stats().reserved_bytes, before.reserved_bytes) << "the pool grew beside the cached blocks";
    for (void* p : held) r.deallocate(p, stream_ref{});
    r.model->check_full();
  });
  EXPECT_EQ(their_hits, 0u) << "its blocks went to this thread";
  r.free_all_and_trim();
}

TEST(TakeBack, BlocksCachedForAnotherStreamStay) {
  // Blocks freed on stream A are not the arena's to hand to stream B until A's work is done: the
  // other thread keeps them, and a request on B grows.
  auto r = grow_first_rig();
  const stream_ref a = r.dev->create_stream(), b = r.dev->create_stream();
  const std::uint64_t their_hits = with_blocks_cached_by_another_thread(r, a, [&] {
    const pool_stats before = r.p->stats();
    void* p = r.allocate(shapes().back(), default_alignment, b);
    EXPECT_GT(r.p->stats().reserved_bytes, before.reserved_bytes);
    r.deallocate(p, b);
    r.model->check_full();
  });
  EXPECT_EQ(their_hits, shapes().size()) << "the other thread's cache kept every block";
  r.free_all_and_trim();
}

}  // namespace
