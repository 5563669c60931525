#include "gpumem/cuda/device_pools.hpp"

#include "cuda_check.hpp"
#include "device_util.hpp"

namespace gpumem {

using namespace cuda_detail;

namespace {
int visible_devices() {
  int n = 0;
  GPUMEM_CUDA_CHECK(cudaGetDeviceCount(&n));
  return n;
}
int current_device_index() {
  int d = 0;
  GPUMEM_CUDA_CHECK(cudaGetDevice(&d));
  return d;
}
}  // namespace

device_pools::device_pools(gpu_pool_options base)
    : map_(visible_devices(),
           [base](int device) {
             gpu_pool_options o = base;
             o.device = device;
             device_guard guard(device);
             return std::make_unique<gpu_pool>(o);
           },
           current_device_index) {}

device_pools& default_device_pools() {
  static device_pools* pools = new device_pools();  // never destroyed, see the header
  return *pools;
}

gpu_pool& current_device_pool() { return default_device_pools().current(); }

}  // namespace gpumem
