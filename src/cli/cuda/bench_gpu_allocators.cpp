// The GPU allocators `gpumem bench` sets side by side, in one process: gpumem's gpu_pool (the
// virtual-memory upstream), cudaMalloc/cudaFree, cudaMallocAsync/cudaFreeAsync on the device's
// default pool, and CUB's CachingDeviceAllocator. Built only with the CUDA layer.
#include <cuda_runtime_api.h>

#include <cstdint>
#include <cub/util_allocator.cuh>
#include <new>
#include <optional>

#include "cuda_check.hpp"
#include "gpumem/cuda/gpu_pool.hpp"
#include "gpumem/cuda/upstreams.hpp"
#include "bench_allocators.hpp"

namespace gpumem::tools {
namespace {

// Every GPU allocator hands the `threads` pattern real non-blocking streams.
class gpu_bench_allocator : public bench_allocator {
 public:
  std::string device() const override { return "gpu"; }
  stream_ref create_stream() override {
    cudaStream_t s = nullptr;
    GPUMEM_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    return from_cuda_stream(s);
  }
  void destroy_stream(stream_ref s) override {
    if (s != stream_ref{}) cudaStreamDestroy(to_cuda_stream(s));
  }
  void synchronize() override { GPUMEM_CUDA_CHECK(cudaDeviceSynchronize()); }
};

class gpumem_gpu_allocator final : public gpu_bench_allocator {
 public:
  gpumem_gpu_allocator() : pool_(options()) {}
  std::string name() const override { return "gpumem-gpu"; }
  void* alloc(std::size_t bytes, stream_ref s) override {
    return pool_.allocate(bytes, default_alignment, s);
  }
  void free(void* p, std::size_t bytes, stream_ref s) override {
    pool_.deallocate(p, bytes, default_alignment, s);
  }
  bool is_gpumem() const override { return true; }
  std::optional<pool_stats> gpumem_stats() const override { return pool_.pool().stats(); }
  std::size_t granule_bytes() const override { return pool_.memory().granularity(); }
  void destroy_stream(stream_ref s) override {
    if (s != stream_ref{}) pool_.pool().release_stream(s);  // the pool must let go of a stream before it dies
    gpu_bench_allocator::destroy_stream(s);
  }

 private:
  // The default pool options: the product, and all bench measures.
  static gpu_pool_options options() {
    gpu_pool_options o;
    o.upstream = gpu_upstream_kind::vmm;
    return o;
  }
  gpu_pool pool_;
};

class cuda_malloc_allocator final : public gpu_bench_allocator {
 public:
  std::string name() const override { return "cuda-malloc"; }
  void* alloc(std::size_t bytes, stream_ref) override {
    void* p = nullptr;
    GPUMEM_CUDA_CHECK(cudaMalloc(&p, bytes));
    return p;
  }
  void free(void* p, std::size_t, stream_ref) override { GPUMEM_CUDA_CHECK(cudaFree(p)); }
};

// The device's default memory pool with its release threshold at the maximum: freed memory stays
// in the pool, the configuration that makes cudaMallocAsync a caching allocator.
class cuda_malloc_async_allocator final : public gpu_bench_allocator {
 public:
  cuda_malloc_async_allocator() {
    int dev = 0;
    GPUMEM_CUDA_CHECK(cudaGetDevice(&dev));
    GPUMEM_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool_, dev));
    std::uint64_t threshold = UINT64_MAX;
    GPUMEM_CUDA_CHECK(cudaMemPoolSetAttribute(pool_, cudaMemPoolAttrReleaseThreshold, &threshold));
    // The device's pool outlives this object: start from nothing, and its high-water mark from now.
    GPUMEM_CUDA_CHECK(cudaDeviceSynchronize());
    GPUMEM_CUDA_CHECK(cudaMemPoolTrimTo(pool_, 0));
    std::uint64_t zero = 0;
    GPUMEM_CUDA_CHECK(cudaMemPoolSetAttribute(pool_, cudaMemPoolAttrReservedMemHigh, &zero));
  }
  ~cuda_malloc_async_allocator() override {
    cudaDeviceSynchronize();
    cudaMemPoolTrimTo(pool_, 0);
  }
  std::string name() const override { return "cuda-malloc-async"; }
  void* alloc(std::size_t bytes, stream_ref s) override {
    void* p = nullptr;
    GPUMEM_CUDA_CHECK(cudaMallocAsync(&p, bytes, to_cuda_stream(s)));
    return p;
  }
  void free(void* p, std::size_t, stream_ref s) override {
    GPUMEM_CUDA_CHECK(cudaFreeAsync(p, to_cuda_stream(s)));
  }
  std::optional<std::size_t> peak_reserved_bytes() override {
    std::uint64_t high = 0;
    GPUMEM_CUDA_CHECK(cudaMemPoolGetAttribute(pool_, cudaMemPoolAttrReservedMemHigh, &high));
    return static_cast<std::size_t>(high);
  }

 private:
  cudaMemPool_t pool_ = nullptr;
};

// CUB's default bins (powers of 8 up to 2 MiB, ~6 MiB cached) would send every large request to
// cudaMalloc; configured here as it is used for caching: power-of-two bins from 256 B to 1 GiB and
// no cap on cached bytes. Larger requests go to cudaMalloc/cudaFree (CUB's behaviour).
class cub_allocator final : public gpu_bench_allocator {
 public:
  cub_allocator() : cub_(2, 8, 30, cub::CachingDeviceAllocator::INVALID_SIZE, false) {}
  ~cub_allocator() override { cudaDeviceSynchronize(); }
  std::string name() const override { return "cub-caching"; }
  void* alloc(std::size_t bytes, stream_ref s) override {
    void* p = nullptr;
    GPUMEM_CUDA_CHECK(cub_.DeviceAllocate(&p, bytes, to_cuda_stream(s)));
    return p;
  }
  void free(void* p, std::size_t, stream_ref) override { GPUMEM_CUDA_CHECK(cub_.DeviceFree(p)); }
  // With no cap on cached bytes CUB gives nothing back, so what it holds now is its peak (requests
  // over the largest bin bypass the cache and are not counted: none of the traces' are that big).
  std::optional<std::size_t> peak_reserved_bytes() override {
    int dev = 0;
    GPUMEM_CUDA_CHECK(cudaGetDevice(&dev));
    const auto it = cub_.cached_bytes.find(dev);
    return it == cub_.cached_bytes.end() ? 0 : it->second.free + it->second.live;
  }

 private:
  cub::CachingDeviceAllocator cub_;
};

}  // namespace

std::vector<bench_allocator_maker> gpu_bench_allocators() {
  return {
      {"gpumem-gpu", [] { return std::make_unique<gpumem_gpu_allocator>(); }},
      {"cuda-malloc", [] { return std::make_unique<cuda_malloc_allocator>(); }},
      {"cuda-malloc-async", [] { return std::make_unique<cuda_malloc_async_allocator>(); }},
      {"cub-caching", [] { return std::make_unique<cub_allocator>(); }},
  };
}

}  // namespace gpumem::tools
