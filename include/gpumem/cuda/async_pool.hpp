#pragma once
// A cudaMemPool_t with its options applied: either one this object creates (and destroys) or the
// device's default pool (borrowed, never destroyed). Shared by async_upstream and async_resource.
#include <cuda_runtime_api.h>

#include <cstddef>
#include <limits>

namespace gpumem {

struct async_pool_options {
  int device = -1;                 // -1: the current device
  bool use_default_pool = false;   // true: the device's default pool (shared with cudaMallocAsync)
  // Bytes the pool keeps cached across synchronisations before giving memory back to the driver.
  // max(): keep everything (what a caching allocator wants).
  std::size_t release_threshold_bytes = std::numeric_limits<std::size_t>::max();
  // The three reuse policies of cudaMemPool (all on by default, as in CUDA):
  bool reuse_follow_event_dependencies = true;  // cudaMemPoolReuseFollowEventDependencies
  bool reuse_allow_opportunistic = true;        // cudaMemPoolReuseAllowOpportunistic
  bool reuse_allow_internal_dependencies = true;  // cudaMemPoolReuseAllowInternalDependencies
};

struct async_pool_stats {
  std::size_t reserved_bytes = 0;       // cudaMemPoolAttrReservedMemCurrent
  std::size_t reserved_high_bytes = 0;  // cudaMemPoolAttrReservedMemHigh
  std::size_t used_bytes = 0;           // cudaMemPoolAttrUsedMemCurrent
  std::size_t used_high_bytes = 0;      // cudaMemPoolAttrUsedMemHigh
};

class async_pool {
 public:
  // Throws cuda_error (e.g. cudaErrorNotSupported where the device has no memory pools).
  explicit async_pool(async_pool_options opts = {});
  ~async_pool();
  async_pool(const async_pool&) = delete;
  async_pool& operator=(const async_pool&) = delete;

  cudaMemPool_t handle() const noexcept { return pool_; }
  int device() const noexcept { return device_; }
  const async_pool_options& options() const noexcept { return opts_; }

  void set_release_threshold(std::size_t bytes);
  // Gives cached memory back to the driver until at most `keep_bytes` stay reserved
  // (cudaMemPoolTrimTo). Memory with pending frees is not released until they complete.
  void trim(std::size_t keep_bytes = 0);
  async_pool_stats stats() const;

 private:
  async_pool_options opts_;
  int device_ = 0;
  cudaMemPool_t pool_ = nullptr;
  bool owned_ = false;
};

}  // namespace gpumem
