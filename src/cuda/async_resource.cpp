#include "gpumem/cuda/async_resource.hpp"

#include <cstdio>

#include "cuda_check.hpp"
#include "resource_util.hpp"
#include "gpumem/cuda/upstreams.hpp"

namespace gpumem {

using namespace cuda_detail;

async_resource::async_resource(async_pool_options opts) : pool_(std::make_shared<async_pool>(opts)) {}

void* async_resource::allocate(std::size_t bytes, std::size_t alignment, stream_ref s) {
  check_alignment("async_resource", alignment, default_alignment);
  if (bytes == 0) return nullptr;
  void* p = nullptr;
  const cudaError_t rc = cudaMallocFromPoolAsync(&p, bytes, pool_->handle(), to_cuda_stream(s));
  if (rc == cudaErrorMemoryAllocation)
    throw_oom("async_resource", "cudaMallocFromPoolAsync", bytes, alignment, s, rc);
  GPUMEM_CUDA_CHECK(rc);
  return p;
}

void async_resource::deallocate(void* p, std::size_t, std::size_t, stream_ref s) noexcept {
  if (!p) return;
  const cudaError_t rc = cudaFreeAsync(p, to_cuda_stream(s));
  if (rc != cudaSuccess)
    std::fprintf(stderr, "gpumem: async_resource: cudaFreeAsync(%p) failed: %s\n", p, cudaGetErrorName(rc));
}

}  // namespace gpumem
