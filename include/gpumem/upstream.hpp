#pragma once
// The pool's view of where memory comes from. CUDA-free: the simulated device and the CUDA layer
// each implement it, so the pool's algorithm is the same code on both.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "gpumem/core.hpp"

namespace gpumem {

// A handle to physical memory of one or more granules (CUmemGenericAllocationHandle on the GPU).
struct physical_handle {
  std::uint64_t value = 0;
  friend bool operator==(physical_handle, physical_handle) = default;
};

// Two shapes of upstream:
//  - plain: hands out whole segments (cudaMalloc, cudaMallocAsync). Blocks coalesce only inside
//    a segment; memory goes back a whole free segment at a time.
//  - virtual: one large address range is reserved once; physical granules are created, mapped at
//    any granule-aligned place in it, unmapped and mapped again elsewhere (cuMemMap & co). Every
//    free neighbour coalesces, and reserved memory is what is mapped, not the height of the range.
//
// Refusal for lack of memory is an ordinary answer (nullptr / nullopt): the pool then releases,
// waits and retries. Any other failure throws (cuda_error on the GPU).
class upstream {
 public:
  virtual ~upstream() = default;
  virtual std::string name() const = 0;
  virtual std::size_t granularity() const noexcept = 0;
  virtual bool supports_virtual() const noexcept = 0;
  // Total memory of the device (0 if unknown): sizes the virtual range and capacity reports.
  virtual std::size_t capacity_bytes() const noexcept = 0;

  // plain shape
  virtual void* allocate_segment(std::size_t bytes) = 0;
  virtual void free_segment(void* base, std::size_t bytes) noexcept = 0;

  // virtual shape (only called when supports_virtual())
  virtual void* reserve_range(std::size_t bytes) = 0;
  virtual void release_range(void* base, std::size_t bytes) noexcept = 0;
  virtual std::optional<physical_handle> create_physical(std::size_t bytes) = 0;
  virtual void release_physical(physical_handle h, std::size_t bytes) noexcept = 0;
  // Maps `h` at `at` (granule aligned) and makes it accessible to the device.
  virtual void map(void* at, std::size_t bytes, physical_handle h) = 0;
  // Maps `count` handles of `bytes_each` at consecutive places from `at`, all or none (throws and
  // leaves nothing mapped). The default maps one at a time; the VMM upstream makes one
  // cuMemSetAccess for the whole run instead of one per handle.
  virtual void map_run(void* at, std::size_t bytes_each, const physical_handle* handles, std::size_t count);
  // Unmaps [at, at + bytes): one mapping, or several laid end to end, each covered whole (one
  // cuMemUnmap on the GPU either way).
  virtual void unmap(void* at, std::size_t bytes) noexcept = 0;

  // Zero-on-free (pool_options::zero_on_free): fills [p, p + bytes) with zeros, ordered on stream
  // `s` after the work already there. The default upstream cannot, and says so.
  virtual bool can_zero() const noexcept { return false; }
  virtual void zero(void* p, std::size_t bytes, stream_ref s);
};

// The stream-ordering rules, expressed as the few questions the pool needs answered. On the GPU:
// events from a small event pool; on the simulator: events whose completion a test controls.
class ordering {
 public:
  virtual ~ordering() = default;
  // Records an event on `s` after all work enqueued there so far.
  virtual event_ref record(stream_ref s) = 0;
  // True once the work before the event has finished. Never true early.
  virtual bool query(event_ref e) = 0;
  // Blocks the host until the event has completed.
  virtual void synchronize(event_ref e) = 0;
  // Makes later work on `s` wait for `e` without blocking the host.
  virtual void stream_wait(stream_ref s, event_ref e) = 0;
  // The pool is done with `e`.
  virtual void release(event_ref e) noexcept = 0;
};

}  // namespace gpumem
