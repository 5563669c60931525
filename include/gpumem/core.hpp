#pragma once
// gpumem core vocabulary. CUDA-free: everything here compiles without the CUDA toolkit.
//
// Glossary — the allocator's words, used with these meanings everywhere in the code:
//   request      what a caller asks for: bytes, alignment, stream.
//   live         memory handed to a caller and not yet given back.
//   cached       memory the pool holds that is not live: free blocks kept for reuse.
//   reserved     memory the pool holds from its upstream (live + cached + rounding). On a
//                virtual-memory upstream: the physical granules it holds, mapped or spare.
//   fragmentation  peak reserved / peak live: what the pool costs on top of the job's own need.
//   upstream     where the pool gets memory: cudaMalloc, a cudaMemPool, the virtual-memory arena,
//                or the simulated device. Reached only through `gpumem::upstream`.
//   segment      a contiguous address range the pool got from its upstream in one piece (plain
//                upstreams), or the single reserved virtual range (virtual upstreams).
//   granule      the upstream's unit of physical memory (2 MiB on the GPU and the simulator).
//   spare        a physical granule the pool holds but has unmapped, ready to be mapped anywhere.
//   harvest      unmapping the whole granules inside free blocks to make spares, so a request that
//                needs contiguous space reuses physical memory instead of growing.
//   idle         a mapped granule no live or stream-owned block touches: what harvest takes.
//   move         a harvested granule mapped again where a request needs it (same memory, no copy;
//                tens of µs of driver calls on a GPU). "Granules moved" counts maps + unmaps.
//   growth       physical memory newly created from the upstream (reserved goes up).
//   initial reserve  memory the pool takes when it is made (pool_options::initial_reserve_bytes),
//                so a job whose working set fits never grows; counted in reserved from the start.
//   idle budget  idle memory kept mapped (a share of live) rather than moved elsewhere.
//   remap time budget  host time for moves, as a share of wall time; spent, the pool grows instead.
//   reserve ceiling  peak reserved over peak live past which the pool moves idle memory before it
//                grows, whatever the idle budget says.
//   stream-ordered move  memory stream S freed while its work is still queued, mapped a second
//                time under S's next request (S's work runs after the free); its old place
//                *retires*: no one may allocate there, and once S has run past it is unmapped or
//                left as a kept mapping.
//   retiring     the old place of a stream-ordered move, until its stream has run past its frees.
//   kept mapping a place a single-granule handle moved away from (or retired from), still mapped
//                by the driver though the pool counts it unmapped: the handle moves back there
//                with no driver call while it is idle elsewhere or spare. Address space only.
//   step plan    a layout of one step of a job that repeats itself, learned from the large
//                requests the arena served; followed, it places each at its offset in one region.
//   stretch      the large requests between two moments when none is live (a server's batch);
//                one the arena moved memory for is laid out and kept, and followed once when its
//                first request comes again.
//   block        a contiguous address range [addr, addr + size) the arena tracks, live or free.
//   arena        the best-fit index over blocks: splits, coalesces, grows, harvests. One lock.
//   size class   a rounded request size; small classes are served from slabs.
//   slab         an arena block carved into equal slots of one small size class.
//   slot         one small object's place in a slab.
//   slab zone    growing first on a virtual upstream, the upper half of the address range, where
//                slabs are carved (every other block in the lower), so a slab never splits the
//                memory large blocks leave; it grows by chunks of a few granules, one handle each.
//   front cache  per-thread, per-stream bins of recently freed blocks, reused without a lock.
//   settle       front caches and empty slabs given back to the pool's free memory, nothing to
//                the upstream (pool::settle): where a job's step ends, so the next step starts
//                from the first step's layout and lands where it landed.
//   stream       an ordered queue of device work (cudaStream_t on the GPU); `stream_ref` here.
//   event        a marker recorded on a stream; completes when the work before it has run.
//   ordering     the interface the pool asks about streams and events (`gpumem::ordering`).
//   stream-owned a free block freed on stream S whose later reuse is safe on S at once, and on any
//                other stream only after an event recorded on S (after the free) has completed.
//   ready        a free block no stream's pending work can touch: reusable by every stream.
#include <compare>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <functional>

// What cudaStream_t points to, declared so that a stream_ref takes a cudaStream_t without this
// header including CUDA's.
struct CUstream_st;

namespace gpumem {

// An opaque stream identity. On the GPU it is the cudaStream_t's value; 0 is the default stream.
// The core never dereferences it: it only compares and hands it to `ordering`. A type of its own,
// not an integer, so that (bytes, stream) and (bytes, alignment) are different calls.
class stream_ref {
 public:
  using value_type = std::uintptr_t;

  constexpr stream_ref() noexcept = default;  // the default stream
  // From a stream's value: the simulator's streams, a trace's stream ids.
  template <std::integral T>
    requires(!std::same_as<T, bool>)
  constexpr explicit stream_ref(T value) noexcept : value_(static_cast<value_type>(value)) {}
  // From a cudaStream_t, implicitly (exactly that type: neither 0 nor nullptr).
  template <class P>
    requires std::same_as<P, ::CUstream_st*>
  stream_ref(P s) noexcept : value_(reinterpret_cast<value_type>(s)) {}

  constexpr value_type value() const noexcept { return value_; }
  // The cudaStream_t.
  ::CUstream_st* get() const noexcept { return reinterpret_cast<::CUstream_st*>(value_); }

  friend constexpr bool operator==(const stream_ref&, const stream_ref&) noexcept = default;
  friend constexpr auto operator<=>(const stream_ref&, const stream_ref&) noexcept = default;

 private:
  value_type value_ = 0;
};

// An event the `ordering` recorded; opaque to the core.
using event_ref = std::uint64_t;

inline constexpr std::size_t default_alignment = 256;   // what cudaMalloc guarantees
inline constexpr std::size_t default_granularity = std::size_t{2} << 20;

constexpr bool is_power_of_two(std::size_t x) noexcept { return x != 0 && (x & (x - 1)) == 0; }

constexpr std::size_t align_up(std::size_t x, std::size_t a) noexcept {
  return (x + a - 1) & ~(a - 1);
}

}  // namespace gpumem

// Hashes as its value does, so maps keyed by stream keep their order.
namespace std {
template <>
struct hash<gpumem::stream_ref> {
  size_t operator()(gpumem::stream_ref s) const noexcept {
    return hash<gpumem::stream_ref::value_type>{}(s.value());
  }
};
}  // namespace std
