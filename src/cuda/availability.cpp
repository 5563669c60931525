#include "gpumem/cuda/availability.hpp"

#include <cuda_runtime_api.h>
#include <fmt/core.h>

namespace gpumem {

namespace {
gpu_status probe() noexcept {
  gpu_status s;
  int count = 0;
  const cudaError_t rc = cudaGetDeviceCount(&count);
  (void)cudaGetLastError();
  switch (rc) {
    case cudaSuccess:
      s.device_count = count;
      s.available = count > 0;
      if (!s.available) s.reason = "no CUDA device visible";
      break;
    case cudaErrorInsufficientDriver:
      // With the static runtime this is also what a machine with no libcuda.so.1 at all reports.
      s.reason = "no CUDA driver (libcuda.so.1 not found, or older than the CUDA 13 runtime)";
      break;
    case cudaErrorNoDevice:
      s.reason = "no CUDA device visible (check CUDA_VISIBLE_DEVICES)";
      break;
    default:
      s.reason = fmt::format("CUDA unavailable: cudaGetDeviceCount returned {} ({})",
                             cudaGetErrorName(rc), static_cast<int>(rc));
  }
  return s;
}
}  // namespace

const gpu_status& gpu_available() noexcept {
  static const gpu_status status = probe();
  return status;
}

}  // namespace gpumem
