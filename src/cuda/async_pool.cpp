#include "gpumem/cuda/async_pool.hpp"

#include <cstdint>
#include <cstdio>

#include "cuda_check.hpp"
#include "device_util.hpp"

namespace gpumem {

using namespace cuda_detail;

namespace {
void set_flag(cudaMemPool_t pool, cudaMemPoolAttr attr, bool on) {
  int value = on ? 1 : 0;
  GPUMEM_CUDA_CHECK(cudaMemPoolSetAttribute(pool, attr, &value));
}
std::size_t get_u64(cudaMemPool_t pool, cudaMemPoolAttr attr) {
  std::uint64_t value = 0;
  GPUMEM_CUDA_CHECK(cudaMemPoolGetAttribute(pool, attr, &value));
  return static_cast<std::size_t>(value);
}
}  // namespace

async_pool::async_pool(async_pool_options opts) : opts_(opts), device_(resolve_device(opts.device)) {
  int supported = 0;
  GPUMEM_CUDA_CHECK(cudaDeviceGetAttribute(&supported, cudaDevAttrMemoryPoolsSupported, device_));
  if (!supported)
    throw cuda_error("cudaDeviceGetAttribute(cudaDevAttrMemoryPoolsSupported)",
                     static_cast<int>(cudaErrorNotSupported), "cudaErrorNotSupported",
                     "this device does not support stream-ordered memory pools (cudaMallocAsync)");
  if (opts_.use_default_pool) {
    GPUMEM_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool_, device_));
  } else {
    cudaMemPoolProps props{};
    props.allocType = cudaMemAllocationTypePinned;
    props.handleTypes = cudaMemHandleTypeNone;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = device_;
    GPUMEM_CUDA_CHECK(cudaMemPoolCreate(&pool_, &props));
    owned_ = true;
  }
  try {
    set_release_threshold(opts_.release_threshold_bytes);
    set_flag(pool_, cudaMemPoolReuseFollowEventDependencies, opts_.reuse_follow_event_dependencies);
    set_flag(pool_, cudaMemPoolReuseAllowOpportunistic, opts_.reuse_allow_opportunistic);
    set_flag(pool_, cudaMemPoolReuseAllowInternalDependencies, opts_.reuse_allow_internal_dependencies);
  } catch (...) {
    if (owned_) (void)cudaMemPoolDestroy(pool_);
    throw;
  }
}

async_pool::~async_pool() {
  if (!owned_) return;
  // Destroying a pool with live allocations is the caller's bug; CUDA reports it, we say so.
  const cudaError_t rc = cudaMemPoolDestroy(pool_);
  if (rc != cudaSuccess)
    std::fprintf(stderr, "gpumem: async_pool: cudaMemPoolDestroy failed: %s\n", cudaGetErrorName(rc));
}

void async_pool::set_release_threshold(std::size_t bytes) {
  std::uint64_t value = bytes;
  GPUMEM_CUDA_CHECK(cudaMemPoolSetAttribute(pool_, cudaMemPoolAttrReleaseThreshold, &value));
  opts_.release_threshold_bytes = bytes;
}

void async_pool::trim(std::size_t keep_bytes) { GPUMEM_CUDA_CHECK(cudaMemPoolTrimTo(pool_, keep_bytes)); }

async_pool_stats async_pool::stats() const {
  async_pool_stats s;
  s.reserved_bytes = get_u64(pool_, cudaMemPoolAttrReservedMemCurrent);
  s.reserved_high_bytes = get_u64(pool_, cudaMemPoolAttrReservedMemHigh);
  s.used_bytes = get_u64(pool_, cudaMemPoolAttrUsedMemCurrent);
  s.used_high_bytes = get_u64(pool_, cudaMemPoolAttrUsedMemHigh);
  return s;
}

}  // namespace gpumem
