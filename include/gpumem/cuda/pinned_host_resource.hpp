#pragma once
// pinned_host_resource: cudaMallocHost (page-locked host memory the device can reach by DMA).
// Pinned pages cannot be swapped, so too much of it starves the rest of the machine: every
// allocation is checked against a cap on the process's total pinned bytes (default 20% of physical
// RAM). Past it, out_of_memory says how much is pinned and what the cap is.
#include <cstddef>

#include "gpumem/core.hpp"
#include "gpumem/cuda/cccl_compat.hpp"
#include "gpumem/host_memory.hpp"  // physical_ram_bytes(), default_pinned_cap_bytes(): the default cap
#include "gpumem/resource.hpp"

namespace gpumem {

// Pinned host bytes this process holds through gpumem (pinned_host_resource + host_registration).
std::size_t pinned_bytes_total() noexcept;

class pinned_host_resource {
 public:
  explicit pinned_host_resource(std::size_t cap_bytes = default_pinned_cap_bytes());
  // Throws std::invalid_argument (alignment above the 4 KiB page cudaMallocHost guarantees),
  // out_of_memory (cap reached, or cudaMallocHost refused), cuda_error.
  void* allocate(std::size_t bytes, std::size_t alignment = default_alignment, stream_ref s = {});
  void deallocate(void* p, std::size_t bytes, std::size_t alignment = default_alignment,
                  stream_ref s = {}) noexcept;
  std::size_t cap_bytes() const noexcept { return cap_; }
  void set_cap_bytes(std::size_t cap) noexcept { cap_ = cap; }
  bool operator==(const pinned_host_resource& o) const noexcept { return cap_ == o.cap_; }

  GPUMEM_CCCL_MEMBERS(pinned_host_resource)
  GPUMEM_CCCL_DEVICE_ACCESSIBLE(pinned_host_resource)
  GPUMEM_CCCL_HOST_ACCESSIBLE(pinned_host_resource)

 private:
  std::size_t cap_;
};

static_assert(resource<pinned_host_resource>);
static_assert(cccl::async_resource_with<pinned_host_resource, cccl::host_accessible>);

}  // namespace gpumem
