#include "gpumem/cuda/managed_resource.hpp"

#include <cstdio>

#include "cuda_check.hpp"
#include "resource_util.hpp"

namespace gpumem {

using namespace cuda_detail;

namespace {
cudaMemLocation location_of(int device) {
  cudaMemLocation loc{};
  if (device == cudaCpuDeviceId) {
    loc.type = cudaMemLocationTypeHost;
    loc.id = 0;
  } else {
    loc.type = cudaMemLocationTypeDevice;
    loc.id = device;
  }
  return loc;
}
}  // namespace

void* managed_resource::allocate(std::size_t bytes, std::size_t alignment, stream_ref s) {
  check_alignment("managed_resource", alignment, default_alignment);
  if (bytes == 0) return nullptr;
  void* p = nullptr;
  const cudaError_t rc = cudaMallocManaged(&p, bytes, cudaMemAttachGlobal);
  if (rc == cudaErrorMemoryAllocation) throw_oom("managed_resource", "cudaMallocManaged", bytes, alignment, s, rc);
  GPUMEM_CUDA_CHECK(rc);
  return p;
}

void managed_resource::deallocate(void* p, std::size_t, std::size_t, stream_ref) noexcept {
  if (!p) return;
  const cudaError_t rc = cudaFree(p);
  if (rc != cudaSuccess)
    std::fprintf(stderr, "gpumem: managed_resource: cudaFree(%p) failed: %s\n", p, cudaGetErrorName(rc));
}

void prefetch(const void* p, std::size_t bytes, int device, cudaStream_t stream) {
  GPUMEM_CUDA_CHECK(cudaMemPrefetchAsync(p, bytes, location_of(device), 0, stream));
}

void advise(const void* p, std::size_t bytes, cudaMemoryAdvise advice, int device) {
  GPUMEM_CUDA_CHECK(cudaMemAdvise(p, bytes, advice, location_of(device)));
}

}  // namespace gpumem
