// libgpumem_pluggable_probe.so: the thinnest allocator PyTorch's CUDAPluggableAllocator can load —
// cudaMallocAsync / cudaFreeAsync on the stream PyTorch passes, the device's default memory pool
// kept whole (release threshold at its maximum). Not for use: bench_models.py runs it beside
// PyTorch's own cudaMallocAsync backend ("native-async") to measure what the pluggable interface
// itself costs a model's step, apart from any allocator behind it.
#include <cuda_runtime.h>
#include <sys/types.h>

#include <cstdint>
#include <cstdio>
#include <mutex>

namespace {
std::once_flag pool_kept;

void keep_pool(int device) {
  cudaMemPool_t pool = nullptr;
  if (cudaDeviceGetDefaultMemPool(&pool, device) != cudaSuccess) return;
  std::uint64_t most = UINT64_MAX;
  (void)cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &most);
}
}  // namespace

extern "C" {

__attribute__((visibility("default"))) void* probe_alloc(ssize_t size, int device, cudaStream_t stream) {
  std::call_once(pool_kept, keep_pool, device);
  void* p = nullptr;
  if (cudaMallocAsync(&p, static_cast<size_t>(size), stream) != cudaSuccess) {
    std::fprintf(stderr, "pluggable_probe: cudaMallocAsync(%zd) failed\n", size);
    return nullptr;
  }
  return p;
}

__attribute__((visibility("default"))) void probe_free(void* ptr, ssize_t, int, cudaStream_t stream) {
  (void)cudaFreeAsync(ptr, stream);
}
}
