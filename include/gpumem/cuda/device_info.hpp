#pragma once
// The seed's memory model of one device, as figures: the five levels (global, shared, registers,
// local, constant) plus what shapes allocation (L2, bus, VMM granularity, memory pools, pinned cap).
// What `gpumem info` prints.
#include <cstddef>
#include <string>

namespace gpumem {

struct device_info {
  int device = 0;
  std::string name;
  int compute_capability_major = 0;
  int compute_capability_minor = 0;
  int multiprocessors = 0;
  // global
  std::size_t global_total_bytes = 0;
  std::size_t global_free_bytes = 0;
  // shared
  std::size_t shared_per_block_bytes = 0;
  std::size_t shared_per_block_optin_bytes = 0;
  std::size_t shared_per_sm_bytes = 0;
  // registers (32-bit each)
  int registers_per_block = 0;
  int registers_per_sm = 0;
  // local: per-thread stack the runtime reserves (cudaLimitStackSize)
  std::size_t local_stack_per_thread_bytes = 0;
  // constant
  std::size_t constant_bytes = 0;
  // what sits around them
  std::size_t l2_bytes = 0;
  int memory_bus_width_bits = 0;
  int memory_clock_khz = 0;
  double peak_global_bandwidth_bytes_per_s = 0;  // 2 (DDR) x clock x bus width
  std::size_t vmm_granularity_bytes = 0;         // 0 when VMM is not supported
  bool vmm_supported = false;
  bool memory_pools_supported = false;
  // host side
  std::size_t pinned_cap_bytes = 0;
  std::size_t pinned_bytes = 0;
  std::size_t physical_ram_bytes = 0;
};

// Throws cuda_error when the device cannot be queried.
device_info query_device_info(int device = 0);

}  // namespace gpumem
