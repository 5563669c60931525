#pragma once
// How debug tooling (the `guard` adaptor) touches the bytes of memory a resource handed out.
//
// The guard writes canaries and poison and reads them back. On host-visible memory that is memset
// and memcpy; on device memory it is cudaMemsetAsync / cudaMemcpyAsync on the caller's stream
// followed by a synchronize. Putting the two behind this narrow interface keeps the guard itself
// CUDA-free, so the same checking code runs in CPU tests and on a GPU.
//
// Stream contract: `fill` is enqueued on `s` after the work already there (on the host: done at
// once). `read` returns only when `host_dst` holds the bytes as they are after the work already
// enqueued on `s` — it may block the host. Both throw on failure (cuda_error on the GPU).
#include <cstddef>
#include <string>

#include "gpumem/core.hpp"

namespace gpumem {

class memory_access {
 public:
  virtual ~memory_access() = default;
  virtual std::string name() const = 0;
  // Sets `bytes` bytes at `dst` to `value`.
  virtual void fill(void* dst, unsigned char value, std::size_t bytes, stream_ref s) = 0;
  // Copies `bytes` bytes from `src` (memory of the resource) into `host_dst` (host memory).
  virtual void read(void* host_dst, const void* src, std::size_t bytes, stream_ref s) = 0;
};

// memset/memcpy: for resources whose memory the host can address (host-backed test resources,
// pinned and managed memory). The stream is ignored: host writes happen at once.
memory_access& host_memory_access() noexcept;

#if defined(GPUMEM_HAVE_CUDA)
// cudaMemsetAsync / cudaMemcpyAsync on the given stream (the stream_ref is the cudaStream_t's
// value), then cudaStreamSynchronize for reads. Works for device, managed and pinned memory.
// Defined in src/cuda/device_memory_access.cpp.
memory_access& device_memory_access() noexcept;
#endif

}  // namespace gpumem
