#pragma once
// managed_resource: cudaMallocManaged (unified memory), reachable from host and device. Pages
// migrate on first touch, which costs page faults; prefetch() moves them ahead of use and advise()
// tells the driver how they will be used. CUDA 13 names the target with a cudaMemLocation; these
// helpers take a device ordinal (cudaCpuDeviceId = the host) to keep call sites short.
#include <cuda_runtime_api.h>

#include <cstddef>

#include "gpumem/core.hpp"
#include "gpumem/cuda/cccl_compat.hpp"
#include "gpumem/resource.hpp"

namespace gpumem {

class managed_resource {
 public:
  // Throws std::invalid_argument (alignment above 256 B), out_of_memory, cuda_error. The stream is
  // ignored: managed memory is usable everywhere once allocated.
  void* allocate(std::size_t bytes, std::size_t alignment = default_alignment, stream_ref s = {});
  void deallocate(void* p, std::size_t bytes, std::size_t alignment = default_alignment,
                  stream_ref s = {}) noexcept;
  bool operator==(const managed_resource&) const noexcept { return true; }

  GPUMEM_CCCL_MEMBERS(managed_resource)
  GPUMEM_CCCL_DEVICE_ACCESSIBLE(managed_resource)
  GPUMEM_CCCL_HOST_ACCESSIBLE(managed_resource)
};

// Migrates [p, p+bytes) to `device` (cudaCpuDeviceId: host memory) in stream order.
void prefetch(const void* p, std::size_t bytes, int device, cudaStream_t stream = nullptr);
// cudaMemAdvise for `device` (cudaCpuDeviceId: the host).
void advise(const void* p, std::size_t bytes, cudaMemoryAdvise advice, int device);

static_assert(resource<managed_resource>);
static_assert(cccl::async_resource_with<managed_resource, cccl::device_accessible, cccl::host_accessible>);

}  // namespace gpumem
