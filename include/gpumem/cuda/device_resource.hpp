#pragma once
// device_resource: cudaMalloc / cudaFree, no caching. The baseline every pool is measured against.
// Cost to know: cudaFree synchronises the whole device (it waits for all work on all streams), so
// deallocate stalls the host — the reason caching pools exist. The stream argument is accepted for
// the common interface and otherwise ignored: cudaMalloc memory is usable on every stream at once.
#include <cstddef>

#include "gpumem/core.hpp"
#include "gpumem/cuda/cccl_compat.hpp"
#include "gpumem/resource.hpp"

namespace gpumem {

class device_resource {
 public:
  explicit device_resource(int device = -1);  // -1: the device current at construction
  // Throws std::invalid_argument (alignment not a power of two, or above the 256 B cudaMalloc
  // guarantees), out_of_memory (cudaErrorMemoryAllocation), cuda_error (anything else).
  void* allocate(std::size_t bytes, std::size_t alignment = default_alignment, stream_ref s = {});
  void deallocate(void* p, std::size_t bytes, std::size_t alignment = default_alignment,
                  stream_ref s = {}) noexcept;
  int device() const noexcept { return device_; }
  bool operator==(const device_resource& o) const noexcept { return device_ == o.device_; }

  GPUMEM_CCCL_MEMBERS(device_resource)
  GPUMEM_CCCL_DEVICE_ACCESSIBLE(device_resource)

 private:
  int device_ = 0;
};

static_assert(resource<device_resource>);
static_assert(cccl::async_resource_with<device_resource, cccl::device_accessible>);
static_assert(!cccl::async_resource_with<device_resource, cccl::host_accessible>);

}  // namespace gpumem
