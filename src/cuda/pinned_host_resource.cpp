#include "gpumem/cuda/pinned_host_resource.hpp"

#include <fmt/core.h>

#include <cstdio>

#include "cuda_check.hpp"
#include "pinned_counter.hpp"
#include "resource_util.hpp"
#include "gpumem/errors.hpp"

namespace gpumem {

using namespace cuda_detail;

namespace cuda_detail {
std::atomic<std::size_t>& pinned_counter() noexcept {
  static std::atomic<std::size_t> bytes{0};
  return bytes;
}
}  // namespace cuda_detail

std::size_t pinned_bytes_total() noexcept { return pinned_counter().load(); }

pinned_host_resource::pinned_host_resource(std::size_t cap_bytes) : cap_(cap_bytes) {}

void* pinned_host_resource::allocate(std::size_t bytes, std::size_t alignment, stream_ref s) {
  // cudaMallocHost returns whole pages.
  check_alignment("pinned_host_resource", alignment, 4096);
  if (bytes == 0) return nullptr;
  // Claim the bytes first so two threads cannot both slip under the cap.
  auto& counter = pinned_counter();
  const std::size_t before = counter.fetch_add(bytes);
  if (before + bytes > cap_) {
    counter.fetch_sub(bytes);
    oom_report r;
    r.requested_bytes = bytes;
    r.alignment = alignment;
    r.stream = s;
    r.live_bytes = before;
    r.limit_bytes = cap_;
    r.upstream_said = fmt::format(
        "pinned_host_resource: {} B requested with {} B already pinned by this process; the cap "
        "is {} B ({:.1f}% of {} B physical RAM)",
        bytes, before, cap_, physical_ram_bytes() ? 100.0 * double(cap_) / double(physical_ram_bytes()) : 0.0,
        physical_ram_bytes());
    r.advice = "free pinned buffers, or raise the cap (pinned_host_resource(cap_bytes) / set_cap_bytes)";
    throw out_of_memory(std::move(r));
  }
  void* p = nullptr;
  const cudaError_t rc = cudaMallocHost(&p, bytes);
  if (rc != cudaSuccess) {
    counter.fetch_sub(bytes);
    if (rc == cudaErrorMemoryAllocation)
      throw_oom("pinned_host_resource", "cudaMallocHost", bytes, alignment, s, rc);
    GPUMEM_CUDA_CHECK(rc);
  }
  return p;
}

void pinned_host_resource::deallocate(void* p, std::size_t bytes, std::size_t, stream_ref) noexcept {
  if (!p) return;
  const cudaError_t rc = cudaFreeHost(p);
  if (rc != cudaSuccess) {
    std::fprintf(stderr, "gpumem: pinned_host_resource: cudaFreeHost(%p) failed: %s\n", p,
                 cudaGetErrorName(rc));
    return;
  }
  pinned_counter().fetch_sub(bytes);
}

}  // namespace gpumem
