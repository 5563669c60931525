#include <cstdio>

#include "cuda_check.hpp"
#include "device_util.hpp"
#include "gpumem/cuda/upstreams.hpp"

namespace gpumem {

using namespace cuda_detail;

device_upstream::device_upstream(int device)
    : device_(resolve_device(device)), capacity_(device_total_bytes(device_)) {}

void* device_upstream::allocate_segment(std::size_t bytes) {
  device_guard g(device_);
  void* p = nullptr;
  const cudaError_t rc = cudaMalloc(&p, bytes);
  if (rc == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();  // refusal is an ordinary answer: the pool releases and retries
    return nullptr;
  }
  GPUMEM_CUDA_CHECK(rc);
  return p;
}

void device_upstream::free_segment(void* base, std::size_t) noexcept {
  // cudaFree synchronises the device; it can only fail on a broken context, which is reported.
  const cudaError_t rc = cudaFree(base);
  if (rc != cudaSuccess)
    std::fprintf(stderr, "gpumem: device_upstream: cudaFree(%p) failed: %s\n", base,
                 cudaGetErrorName(rc));
}

}  // namespace gpumem
