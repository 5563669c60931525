#pragma once
// async_resource: cudaMallocAsync / cudaFreeAsync on a cudaMemPool_t (its own, or the device's
// default), with the pool's release threshold, trim and reuse policies as options. A value type:
// copies share the same pool and compare equal.
#include <cstddef>
#include <memory>

#include "gpumem/core.hpp"
#include "gpumem/cuda/async_pool.hpp"
#include "gpumem/cuda/cccl_compat.hpp"
#include "gpumem/resource.hpp"

namespace gpumem {

class async_resource {
 public:
  explicit async_resource(async_pool_options opts = {});
  // Stream-ordered: usable by work enqueued on `s` after the call. Throws std::invalid_argument
  // (alignment above 256 B or not a power of two), out_of_memory, cuda_error.
  void* allocate(std::size_t bytes, std::size_t alignment = default_alignment, stream_ref s = {});
  void deallocate(void* p, std::size_t bytes, std::size_t alignment = default_alignment,
                  stream_ref s = {}) noexcept;

  async_pool& memory_pool() const noexcept { return *pool_; }
  void trim(std::size_t keep_bytes = 0) { pool_->trim(keep_bytes); }
  async_pool_stats stats() const { return pool_->stats(); }
  bool operator==(const async_resource& o) const noexcept { return pool_ == o.pool_; }

  GPUMEM_CCCL_MEMBERS(async_resource)
  GPUMEM_CCCL_DEVICE_ACCESSIBLE(async_resource)

 private:
  std::shared_ptr<async_pool> pool_;
};

static_assert(resource<async_resource>);
static_assert(cccl::async_resource_with<async_resource, cccl::device_accessible>);

}  // namespace gpumem
