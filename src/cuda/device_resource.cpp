#include "gpumem/cuda/device_resource.hpp"

#include <cstdio>

#include "cuda_check.hpp"
#include "device_util.hpp"
#include "resource_util.hpp"

namespace gpumem {

using namespace cuda_detail;

device_resource::device_resource(int device) : device_(resolve_device(device)) {}

void* device_resource::allocate(std::size_t bytes, std::size_t alignment, stream_ref s) {
  check_alignment("device_resource", alignment, default_alignment);
  if (bytes == 0) return nullptr;
  device_guard g(device_);
  void* p = nullptr;
  const cudaError_t rc = cudaMalloc(&p, bytes);
  if (rc == cudaErrorMemoryAllocation) throw_oom("device_resource", "cudaMalloc", bytes, alignment, s, rc);
  GPUMEM_CUDA_CHECK(rc);
  return p;
}

void device_resource::deallocate(void* p, std::size_t, std::size_t, stream_ref) noexcept {
  if (!p) return;
  const cudaError_t rc = cudaFree(p);  // synchronises the device
  if (rc != cudaSuccess)
    std::fprintf(stderr, "gpumem: device_resource: cudaFree(%p) failed: %s\n", p, cudaGetErrorName(rc));
}

}  // namespace gpumem
