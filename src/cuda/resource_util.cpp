#include "resource_util.hpp"

#include <fmt/core.h>

#include <stdexcept>

#include "gpumem/errors.hpp"

namespace gpumem::cuda_detail {

void check_alignment(const char* who, std::size_t alignment, std::size_t max_alignment) {
  if (!is_power_of_two(alignment))
    throw std::invalid_argument(
        fmt::format("{}: alignment {} is not a power of two", who, alignment));
  if (alignment > max_alignment)
    throw std::invalid_argument(fmt::format(
        "{}: alignment {} B is more than the {} B its CUDA allocator guarantees; use gpumem::pool "
        "(alignments up to the granule) instead", who, alignment, max_alignment));
}

void throw_oom(const char* who, const char* call, std::size_t bytes, std::size_t alignment,
               stream_ref s, cudaError_t rc) {
  (void)cudaGetLastError();
  std::size_t free_bytes = 0, total_bytes = 0;
  const bool known = cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess;
  (void)cudaGetLastError();
  oom_report r;
  r.requested_bytes = bytes;
  r.alignment = alignment;
  r.stream = s;
  r.upstream_said = known ? fmt::format("{}: {} returned {} with {} of {} bytes free on the device",
                                        who, call, cudaGetErrorName(rc), free_bytes, total_bytes)
                          : fmt::format("{}: {} returned {}", who, call, cudaGetErrorName(rc));
  r.advice = "free or cache less device memory, or use gpumem::pool to reuse freed blocks";
  throw out_of_memory(std::move(r));
}

}  // namespace gpumem::cuda_detail
