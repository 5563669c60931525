// `gpumem info [--json] [--device N]`: the device's memory model — the seed's five levels (global,
// shared, registers, local, constant) and what shapes allocation on it. Without a GPU: one line on
// stderr saying why, exit 2.
#include <fmt/core.h>

#include <nlohmann/json.hpp>

#include "command.hpp"
#include "errors.hpp"

#if GPUMEM_HAVE_CUDA
#include "gpumem/cuda/availability.hpp"
#include "gpumem/cuda/device_info.hpp"
#endif

namespace gpumem::tools {
namespace {

#if GPUMEM_HAVE_CUDA
std::string mib(std::size_t b) { return fmt::format("{:.1f} MiB", double(b) / double(1 << 20)); }
std::string kib(std::size_t b) { return fmt::format("{:.0f} KiB", double(b) / 1024.0); }

nlohmann::json to_json(const device_info& d) {
  return {
      {"device", d.device},
      {"name", d.name},
      {"compute_capability", fmt::format("{}.{}", d.compute_capability_major, d.compute_capability_minor)},
      {"multiprocessors", d.multiprocessors},
      {"global_total_bytes", d.global_total_bytes},
      {"global_free_bytes", d.global_free_bytes},
      {"shared_per_block_bytes", d.shared_per_block_bytes},
      {"shared_per_block_optin_bytes", d.shared_per_block_optin_bytes},
      {"shared_per_sm_bytes", d.shared_per_sm_bytes},
      {"registers_per_block", d.registers_per_block},
      {"registers_per_sm", d.registers_per_sm},
      {"local_stack_per_thread_bytes", d.local_stack_per_thread_bytes},
      {"constant_bytes", d.constant_bytes},
      {"l2_bytes", d.l2_bytes},
      {"memory_bus_width_bits", d.memory_bus_width_bits},
      {"memory_clock_khz", d.memory_clock_khz},
      {"peak_global_bandwidth_bytes_per_s", d.peak_global_bandwidth_bytes_per_s},
      {"vmm_supported", d.vmm_supported},
      {"vmm_granularity_bytes", d.vmm_granularity_bytes},
      {"memory_pools_supported", d.memory_pools_supported},
      {"pinned_cap_bytes", d.pinned_cap_bytes},
      {"pinned_bytes", d.pinned_bytes},
      {"physical_ram_bytes", d.physical_ram_bytes},
  };
}

void print_text(const device_info& d) {
  fmt::print("device {}: {} (compute capability {}.{}, {} SMs)\n", d.device, d.name,
             d.compute_capability_major, d.compute_capability_minor, d.multiprocessors);
  fmt::print("  global memory     total {}, free {}\n", mib(d.global_total_bytes), mib(d.global_free_bytes));
  fmt::print("  shared memory     {} per block ({} opt-in), {} per SM\n",
             kib(d.shared_per_block_bytes), kib(d.shared_per_block_optin_bytes), kib(d.shared_per_sm_bytes));
  fmt::print("  registers         {} per block, {} per SM (32-bit)\n", d.registers_per_block, d.registers_per_sm);
  fmt::print("  local memory      stack limit {} B per thread\n", d.local_stack_per_thread_bytes);
  fmt::print("  constant memory   {}\n", kib(d.constant_bytes));
  fmt::print("  L2 cache          {}\n", mib(d.l2_bytes));
  fmt::print("  memory bus        {} bit at {} MHz: peak {:.0f} GB/s\n", d.memory_bus_width_bits,
             d.memory_clock_khz / 1000, d.peak_global_bandwidth_bytes_per_s / 1e9);
  fmt::print("  virtual memory    {}{}\n", d.vmm_supported ? "supported" : "not supported",
             d.vmm_supported ? fmt::format(", granularity {}", mib(d.vmm_granularity_bytes)) : "");
  fmt::print("  memory pools      {}\n", d.memory_pools_supported ? "supported (cudaMallocAsync)" : "not supported");
  fmt::print("  pinned host cap   {} of {} RAM ({} pinned now)\n", mib(d.pinned_cap_bytes),
             mib(d.physical_ram_bytes), mib(d.pinned_bytes));
}
#endif

const registrar reg{command{
    "info", "Show the device's memory model: global, shared, registers, local, constant, and more",
    [](CLI::App& sub, int& exit_code) {
      auto json = std::make_shared<bool>(false);
      auto device = std::make_shared<int>(-1);
      sub.add_flag("--json", *json, "One JSON object per device on its own line");
      sub.add_option("--device", *device, "Device ordinal (default: every visible device)")
          ->check(CLI::NonNegativeNumber);
      sub.footer("Needs a GPU (exit 2 without one).\n\nExample:\n  gpumem info --device 0 --json");
      sub.callback([json, device, &exit_code] {
#if GPUMEM_HAVE_CUDA
        const gpu_status& gpu = gpu_available();
        if (!gpu) {
          print_error("info", gpu.reason);
          exit_code = exit_unavailable;
          return;
        }
        if (*device >= gpu.device_count) {
          print_error("info", "--device {}: only {} device(s) visible", *device, gpu.device_count);
          exit_code = exit_unavailable;
          return;
        }
        const int first = *device >= 0 ? *device : 0;
        const int last = *device >= 0 ? *device : gpu.device_count - 1;
        for (int d = first; d <= last; ++d) {
          const device_info info = query_device_info(d);
          if (*json) fmt::print("{}\n", to_json(info).dump());
          else print_text(info);
        }
        exit_code = exit_ok;
#else
        (void)json;
        (void)device;
        print_error("info", "this build has no CUDA layer (configured without the CUDA toolkit)");
        exit_code = exit_unavailable;
#endif
      });
    }}};

}  // namespace
}  // namespace gpumem::tools
