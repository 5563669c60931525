#include "device_util.hpp"

#include <cuda_runtime_api.h>
#include <fmt/core.h>

#include <stdexcept>

#include "cuda_check.hpp"

namespace gpumem::cuda_detail {

int resolve_device(int device) {
  if (device >= 0) return device;
  int current = 0;
  GPUMEM_CUDA_CHECK(cudaGetDevice(&current));
  return current;
}

void zero_async(void* p, std::size_t bytes, stream_ref s) {
  GPUMEM_CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, s.get()));
}

std::size_t device_total_bytes(int device) {
  device_guard g(device);
  std::size_t free_bytes = 0, total_bytes = 0;
  GPUMEM_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  return total_bytes;
}

device_guard::device_guard(int device) {
  GPUMEM_CUDA_CHECK(cudaGetDevice(&previous_));
  if (previous_ != device) GPUMEM_CUDA_CHECK(cudaSetDevice(device));
}

device_guard::~device_guard() {
  int now = -1;
  if (cudaGetDevice(&now) == cudaSuccess && now != previous_) (void)cudaSetDevice(previous_);
}

void no_virtual_shape(const std::string& upstream_name, const char* call) {
  throw std::logic_error(fmt::format(
      "{}: {} called on a plain upstream (supports_virtual() is false); the pool must use "
      "allocate_segment/free_segment here", upstream_name, call));
}

void no_plain_shape(const std::string& upstream_name, const char* call) {
  throw std::logic_error(fmt::format(
      "{}: {} called on a virtual upstream; the pool must use reserve_range/create_physical/map",
      upstream_name, call));
}

}  // namespace gpumem::cuda_detail
