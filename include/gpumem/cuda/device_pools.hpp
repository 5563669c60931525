#pragma once
// One gpu_pool per device, chosen by the calling thread's current device (cudaGetDevice), as
// RMM's per_device_resource: each pool on its own device's memory, built on first use with that
// device current. Built on the CUDA-free gpumem::per_device (gpumem/per_device.hpp).
#include "gpumem/cuda/gpu_pool.hpp"
#include "gpumem/per_device.hpp"

namespace gpumem {

class device_pools {
 public:
  // Every visible device (cudaGetDeviceCount; throws cuda_error when there is none). Each pool is
  // made with `base`, its `device` set to the pool's own.
  explicit device_pools(gpu_pool_options base = {});

  // The pool of `device`, built on first use. Throws std::out_of_range for an index that is not a
  // visible device, else what gpu_pool's constructor throws.
  gpu_pool& get(int device) { return map_.get(device); }
  // The pool of the calling thread's current device.
  gpu_pool& current() { return map_.current(); }
  // The pool of `device` if built, else nullptr.
  gpu_pool* find(int device) const noexcept { return map_.find(device); }
  int device_count() const noexcept { return map_.device_count(); }

 private:
  per_device<gpu_pool> map_;
};

// The process's map with default options, made on first use and never destroyed (work may free
// memory while the process exits, after static destructors have run).
device_pools& default_device_pools();
// default_device_pools().current(): the pool of the calling thread's current device.
gpu_pool& current_device_pool();

}  // namespace gpumem
