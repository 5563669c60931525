#pragma once
// The CUDA implementations of the pool's `upstream` and `ordering` interfaces (upstream.hpp), so
// the CUDA-free gpumem::pool sits on real device memory. All driver calls go through entry points
// the static runtime resolves (cudaGetDriverEntryPointByVersion); nothing links libcuda.
#include <cuda_runtime_api.h>

#include <atomic>
#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "gpumem/cuda/async_pool.hpp"
#include "gpumem/upstream.hpp"

namespace gpumem {

// What the two plain-shape CUDA upstreams share: 2 MiB segments' granularity, zeroing by
// cudaMemsetAsync, and a clear error for the virtual-shape calls they never get.
class plain_cuda_upstream : public upstream {
 public:
  std::size_t granularity() const noexcept override { return default_granularity; }
  bool supports_virtual() const noexcept override { return false; }
  void* reserve_range(std::size_t) override;
  void release_range(void*, std::size_t) noexcept override {}
  std::optional<physical_handle> create_physical(std::size_t) override;
  void release_physical(physical_handle, std::size_t) noexcept override {}
  void map(void*, std::size_t, physical_handle) override;
  void unmap(void*, std::size_t) noexcept override {}
  bool can_zero() const noexcept override { return true; }
  void zero(void* p, std::size_t bytes, stream_ref s) override;  // cudaMemsetAsync
};

// Plain shape: each segment is one cudaMalloc. cudaFree synchronises the whole device, which is
// why the pool caches segments instead of giving them back.
class device_upstream final : public plain_cuda_upstream {
 public:
  explicit device_upstream(int device = -1);   // -1: the current device
  std::string name() const override { return "cuda-malloc"; }
  int device() const noexcept { return device_; }
  std::size_t capacity_bytes() const noexcept override { return capacity_; }
  // nullptr on cudaErrorMemoryAllocation (error cleared); other failures throw cuda_error.
  void* allocate_segment(std::size_t bytes) override;
  void free_segment(void* base, std::size_t bytes) noexcept override;

 private:
  int device_ = 0;
  std::size_t capacity_ = 0;
};

// Plain shape over a cudaMemPool_t: segments come from cudaMallocFromPoolAsync on an internal
// stream that is synchronised before the segment is handed out (the pool does its own stream
// ordering; a segment must be usable on any stream at once). Segment calls are the slow path.
class async_upstream final : public plain_cuda_upstream {
 public:
  explicit async_upstream(async_pool_options opts = {});
  ~async_upstream() override;
  std::string name() const override { return "cuda-mempool"; }
  std::size_t capacity_bytes() const noexcept override { return capacity_; }
  void* allocate_segment(std::size_t bytes) override;
  void free_segment(void* base, std::size_t bytes) noexcept override;

  async_pool& memory_pool() noexcept { return pool_; }

 private:
  async_pool pool_;
  cudaStream_t stream_ = nullptr;
  std::size_t capacity_ = 0;
};

// Virtual shape over the driver's VMM API: reserve_range = cuMemAddressReserve, create_physical =
// cuMemCreate (pinned device memory), map = cuMemMap + cuMemSetAccess (read/write for the device;
// map_run: one cuMemMap per handle and one cuMemSetAccess for the run), unmap = cuMemUnmap (a run
// of whole mappings in one call), release_physical = cuMemRelease. Granularity: the device's minimum
// (CU_MEM_ALLOC_GRANULARITY_MINIMUM; 2 MiB on current GPUs).
//
// Shareable (the default, where the device supports it): cuMemCreate asks for handles that can be
// exported as POSIX file descriptors (requestedHandleTypes), and the upstream remembers each live
// handle's size, so gpu_pool::export_block can send a block to another process (cuda/ipc.hpp). A
// driver that refuses such handles gets plain ones from then on, and export says why.
class vmm_upstream final : public upstream {
 public:
  explicit vmm_upstream(int device = -1, bool shareable = true);
  std::string name() const override { return "cuda-vmm"; }
  std::size_t granularity() const noexcept override { return granularity_; }
  bool supports_virtual() const noexcept override { return true; }
  std::size_t capacity_bytes() const noexcept override { return capacity_; }
  void* allocate_segment(std::size_t bytes) override;
  void free_segment(void*, std::size_t) noexcept override {}
  void* reserve_range(std::size_t bytes) override;
  void release_range(void* base, std::size_t bytes) noexcept override;
  // nullopt on CUDA_ERROR_OUT_OF_MEMORY; other failures throw cuda_error.
  std::optional<physical_handle> create_physical(std::size_t bytes) override;
  void release_physical(physical_handle h, std::size_t bytes) noexcept override;
  void map(void* at, std::size_t bytes, physical_handle h) override;
  // One cuMemMap per handle, one cuMemSetAccess for the run.
  void map_run(void* at, std::size_t bytes_each, const physical_handle* handles, std::size_t count) override;
  void unmap(void* at, std::size_t bytes) noexcept override;
  bool can_zero() const noexcept override { return true; }
  void zero(void* p, std::size_t bytes, stream_ref s) override;  // cudaMemsetAsync

  std::size_t physical_bytes() const noexcept { return physical_bytes_.load(); }
  std::size_t mapped_bytes() const noexcept { return mapped_bytes_.load(); }

  int device() const noexcept { return device_; }
  // True while handles are created exportable; else why not, in unshareable_reason().
  bool shareable() const noexcept { return shareable_.load(std::memory_order_acquire); }
  std::string unshareable_reason() const;
  // The size of live handle `value` created shareable, 0 if unknown.
  std::size_t handle_bytes(std::uint64_t value) const;

 private:
  int device_ = 0;
  std::size_t granularity_ = default_granularity;
  std::size_t capacity_ = 0;
  std::atomic<bool> shareable_{false};
  bool records_handles_ = false;  // made shareable: handle_bytes_ is kept (else never touched)
  mutable std::mutex handles_mutex_;
  std::string unshareable_reason_;                                 // under handles_mutex_
  std::unordered_map<std::uint64_t, std::size_t> handle_bytes_;    // under handles_mutex_
  std::atomic<std::size_t> physical_bytes_{0};
  std::atomic<std::size_t> mapped_bytes_{0};
};

// The pool's stream-ordering questions answered with CUDA events (cudaEventDisableTiming: no
// timestamps, the cheapest kind) from a recycled pool: creating an event costs far more than
// reusing one. stream_ref is the cudaStream_t's value; 0 is the default stream.
class cuda_ordering final : public ordering {
 public:
  cuda_ordering() = default;
  ~cuda_ordering() override;
  event_ref record(stream_ref s) override;
  bool query(event_ref e) override;
  void synchronize(event_ref e) override;
  void stream_wait(stream_ref s, event_ref e) override;
  void release(event_ref e) noexcept override;

  std::size_t events_created() const noexcept { return created_.load(); }

 private:
  std::mutex mutex_;
  std::vector<cudaEvent_t> free_;
  std::atomic<std::size_t> created_{0};
};

inline cudaStream_t to_cuda_stream(stream_ref s) noexcept { return s.get(); }
inline stream_ref from_cuda_stream(cudaStream_t s) noexcept { return stream_ref{s}; }

}  // namespace gpumem
