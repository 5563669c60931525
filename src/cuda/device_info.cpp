#include "gpumem/cuda/device_info.hpp"

#include <cuda_runtime_api.h>

#include "cuda_check.hpp"
#include "device_util.hpp"
#include "driver_api.hpp"
#include "gpumem/cuda/pinned_host_resource.hpp"

namespace gpumem {

using namespace cuda_detail;

namespace {
int attribute(cudaDeviceAttr a, int device) {
  int v = 0;
  GPUMEM_CUDA_CHECK(cudaDeviceGetAttribute(&v, a, device));
  return v;
}
}  // namespace

device_info query_device_info(int device) {
  device_guard g(device);
  device_info d;
  d.device = device;
  cudaDeviceProp prop{};
  GPUMEM_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  d.name = prop.name;
  d.compute_capability_major = attribute(cudaDevAttrComputeCapabilityMajor, device);
  d.compute_capability_minor = attribute(cudaDevAttrComputeCapabilityMinor, device);
  d.multiprocessors = attribute(cudaDevAttrMultiProcessorCount, device);
  GPUMEM_CUDA_CHECK(cudaMemGetInfo(&d.global_free_bytes, &d.global_total_bytes));
  d.shared_per_block_bytes = std::size_t(attribute(cudaDevAttrMaxSharedMemoryPerBlock, device));
  d.shared_per_block_optin_bytes = std::size_t(attribute(cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  d.shared_per_sm_bytes = std::size_t(attribute(cudaDevAttrMaxSharedMemoryPerMultiprocessor, device));
  d.registers_per_block = attribute(cudaDevAttrMaxRegistersPerBlock, device);
  d.registers_per_sm = attribute(cudaDevAttrMaxRegistersPerMultiprocessor, device);
  GPUMEM_CUDA_CHECK(cudaDeviceGetLimit(&d.local_stack_per_thread_bytes, cudaLimitStackSize));
  d.constant_bytes = std::size_t(attribute(cudaDevAttrTotalConstantMemory, device));
  d.l2_bytes = std::size_t(attribute(cudaDevAttrL2CacheSize, device));
  d.memory_bus_width_bits = attribute(cudaDevAttrGlobalMemoryBusWidth, device);
  d.memory_clock_khz = attribute(cudaDevAttrMemoryClockRate, device);
  d.peak_global_bandwidth_bytes_per_s =
      2.0 * double(d.memory_clock_khz) * 1e3 * double(d.memory_bus_width_bits) / 8.0;
  d.memory_pools_supported = attribute(cudaDevAttrMemoryPoolsSupported, device) != 0;

  const driver_api& drv = driver();
  CUdevice dev = 0;
  GPUMEM_CU_CHECK(drv.device_get(&dev, device));
  int vmm = 0;
  GPUMEM_CU_CHECK(drv.device_get_attribute(&vmm, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, dev));
  d.vmm_supported = vmm != 0;
  if (d.vmm_supported) {
    CUmemAllocationProp p{};
    p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    p.location.id = device;
    GPUMEM_CU_CHECK(drv.mem_get_allocation_granularity(&d.vmm_granularity_bytes, &p,
                                                       CU_MEM_ALLOC_GRANULARITY_MINIMUM));
  }
  d.pinned_cap_bytes = default_pinned_cap_bytes();
  d.pinned_bytes = pinned_bytes_total();
  d.physical_ram_bytes = physical_ram_bytes();
  return d;
}

}  // namespace gpumem
