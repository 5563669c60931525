#include <cstdio>

#include "cuda_check.hpp"
#include "device_util.hpp"
#include "gpumem/cuda/upstreams.hpp"

namespace gpumem {

using namespace cuda_detail;

async_upstream::async_upstream(async_pool_options opts)
    : pool_(opts), capacity_(device_total_bytes(pool_.device())) {
  device_guard g(pool_.device());
  GPUMEM_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
}

async_upstream::~async_upstream() {
  if (stream_) (void)cudaStreamDestroy(stream_);
}

void* async_upstream::allocate_segment(std::size_t bytes) {
  void* p = nullptr;
  const cudaError_t rc = cudaMallocFromPoolAsync(&p, bytes, pool_.handle(), stream_);
  if (rc == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    return nullptr;
  }
  GPUMEM_CUDA_CHECK(rc);
  // The pool hands segments to any stream at once: make the allocation complete first.
  GPUMEM_CUDA_CHECK(cudaStreamSynchronize(stream_));
  return p;
}

void async_upstream::free_segment(void* base, std::size_t) noexcept {
  // The pool frees a segment only when no stream's pending work can touch it, so the internal
  // stream is a valid place to order the free.
  const cudaError_t rc = cudaFreeAsync(base, stream_);
  if (rc != cudaSuccess)
    std::fprintf(stderr, "gpumem: async_upstream: cudaFreeAsync(%p) failed: %s\n", base,
                 cudaGetErrorName(rc));
}

}  // namespace gpumem
