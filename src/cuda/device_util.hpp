#pragma once
// Small helpers the CUDA layer shares: which device, how big, and the plain upstreams' answer to
// virtual-shape calls they never get.
#include <cstddef>
#include <cstdint>
#include <string>

#include "gpumem/core.hpp"

namespace gpumem::cuda_detail {

// `device` if >= 0, else the current device.
int resolve_device(int device);
// Total memory of `device` (cudaDeviceGetAttribute-free: cudaMemGetInfo on that device).
std::size_t device_total_bytes(int device);
// Makes `device` current for the rest of the calling scope; restores the previous one after.
class device_guard {
 public:
  explicit device_guard(int device);
  ~device_guard();
  device_guard(const device_guard&) = delete;
  device_guard& operator=(const device_guard&) = delete;

 private:
  int previous_ = -1;
};

// cudaMemsetAsync(p, 0, bytes) on stream `s`, checked.
void zero_async(void* p, std::size_t bytes, stream_ref s);

[[noreturn]] void no_virtual_shape(const std::string& upstream_name, const char* call);
[[noreturn]] void no_plain_shape(const std::string& upstream_name, const char* call);

}  // namespace gpumem::cuda_detail
