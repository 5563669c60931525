// stream_ref is a type of its own, not an integer: pool.allocate(bytes, stream) and
// pool.allocate(bytes, alignment) are different calls, and so are the two deallocates.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <iterator>
#include <map>
#include <type_traits>
#include <unordered_map>

#include "gpumem/errors.hpp"
#include "gpumem/pool.hpp"
#include "gpumem/sim_device.hpp"

namespace {

using namespace gpumem;

static_assert(!std::is_convertible_v<std::size_t, stream_ref>, "no stream from a size, implicitly");
static_assert(!std::is_convertible_v<int, stream_ref>);
static_assert(!std::is_convertible_v<std::nullptr_t, stream_ref>);
static_assert(!std::is_convertible_v<stream_ref, std::size_t>);
static_assert(std::is_constructible_v<stream_ref, std::uint64_t>, "explicitly from a stream's value");
static_assert(std::is_convertible_v<CUstream_st*, stream_ref>, "implicitly from a cudaStream_t");
static_assert(std::is_trivially_copyable_v<stream_ref>);
static_assert(sizeof(stream_ref) == sizeof(std::uintptr_t));
static_assert(stream_ref{}.value() == 0 && stream_ref{} == stream_ref{0});
static_assert(stream_ref{7}.value() == 7 && stream_ref{7} != stream_ref{8} && stream_ref{7} < stream_ref{8});

// Both spellings of each call compile against the pool.
static_assert(requires(pool& p, void* q) {
  p.allocate(std::size_t{3000}, stream_ref{7});
  p.allocate(std::size_t{3000}, std::size_t{512});
  p.allocate(std::size_t{3000}, std::size_t{512}, stream_ref{7});
  p.deallocate(q, std::size_t{3000}, stream_ref{7});
  p.deallocate(q, std::size_t{3000}, std::size_t{512});
  p.deallocate(q, std::size_t{3000}, std::size_t{512}, stream_ref{7});
});

int misuses = 0;
void count_misuse(const misuse_report&) { ++misuses; }

class StreamRefCalls : public ::testing::Test {
 protected:
  void SetUp() override {
    misuses = 0;
    previous_ = set_misuse_handler(&count_misuse);
  }
  void TearDown() override { set_misuse_handler(previous_); }

  // The stream the pool records for the live block at `p`.
  static stream_ref stream_of(const pool& p, const void* at) {
    for (const block_info& b : p.blocks())
      if (b.address == reinterpret_cast<std::uintptr_t>(at)) return b.stream;
    ADD_FAILURE() << "no block at " << at;
    return stream_ref{~std::uintptr_t{0}};
  }

  misuse_handler previous_ = nullptr;
};

TEST_F(StreamRefCalls, TwoArgumentsPickStreamOrAlignment) {
  sim_device dev(sim_options{.capacity_bytes = std::size_t{1} << 30});
  // Requests of 3000 bytes get arena blocks of their own, so blocks() names their stream.
  pool p(dev.memory(), dev.streams(), pool_options{.small_max_bytes = 1024});
  void* on7 = p.allocate(3000, stream_ref{7});
  void* aligned = p.allocate(3000, 512);
  void* both = p.allocate(3000, 1024, stream_ref{9});
  EXPECT_EQ(stream_of(p, on7), stream_ref{7});
  EXPECT_EQ(stream_of(p, aligned), stream_ref{});
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(aligned) % 512, 0u);
  EXPECT_EQ(stream_of(p, both), stream_ref{9});
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(both) % 1024, 0u);
  // Each free must name the alignment asked at allocate: read the other way, one would be
  // misuse (alignment 7, or a block of alignment 512 freed as 256).
  p.deallocate(on7, 3000, stream_ref{7});
  p.deallocate(aligned, 3000, 512);
  p.deallocate(both, 3000, 1024, stream_ref{9});
  EXPECT_EQ(misuses, 0);
  p.check_invariants();
}

TEST_F(StreamRefCalls, FreedOnAStreamComesBackOnThatStream) {
  // Default options (3000 bytes is a slab slot), events never complete: what stream 7 freed is
  // stream 7's until its work has run, so only a request on stream 7 may take it back.
  sim_device dev(sim_options{.capacity_bytes = std::size_t{1} << 30});
  pool p(dev.memory(), dev.streams());
  void* a = p.allocate(3000, stream_ref{7});
  p.deallocate(a, 3000, stream_ref{7});
  void* on_default = p.allocate(3000, 256);
  EXPECT_NE(on_default, a);
  void* again = p.allocate(3000, stream_ref{7});
  EXPECT_EQ(again, a);
  p.deallocate(again, 3000, stream_ref{7});
  p.deallocate(on_default, 3000, 256);
  EXPECT_EQ(misuses, 0);
  p.check_invariants();
}

TEST(StreamRef, WorksAsAMapKey) {
  std::unordered_map<stream_ref, int> hashed;
  std::map<stream_ref, int> ordered;
  for (int i = 0; i < 4; ++i) {
    hashed[stream_ref{i * 16}] = i;
    ordered[stream_ref{i * 16}] = i;
  }
  EXPECT_EQ(hashed.at(stream_ref{32}), 2);
  EXPECT_EQ(ordered.begin()->first, stream_ref{});
  EXPECT_EQ(std::prev(ordered.end())->first, stream_ref{48});
  // The hash is the value's, so maps keyed by stream keep the order they had with integer keys.
  EXPECT_EQ(std::hash<stream_ref>{}(stream_ref{0x1230}), std::hash<std::uintptr_t>{}(0x1230));
}

TEST(StreamRef, TakesACudaStreamHandle) {
  // What cudaStream_t is; the value is the handle's address, as the GPU layer passes it on.
  CUstream_st* handle = reinterpret_cast<CUstream_st*>(std::uintptr_t{0x55d0c0ffee00});
  const stream_ref s = handle;
  EXPECT_EQ(s.value(), 0x55d0c0ffee00u);
  EXPECT_EQ(s.get(), handle);
  EXPECT_EQ(stream_ref{}.get(), nullptr);
}

}  // namespace
