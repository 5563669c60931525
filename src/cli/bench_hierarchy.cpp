// `gpumem bench-hierarchy [--json] [--reps N] [--device N]`: measures the seed's memory model on
// the device and sets the ratios next to its claim that shared memory is about two orders of
// magnitude faster than global memory. Registered top-level as `bench-hierarchy` so it does not
// collide with the allocator benchmarks' `bench`; it can move under `bench hierarchy` unchanged
// (the setup below only needs a CLI::App to add options to).
#include <fmt/core.h>

#include <nlohmann/json.hpp>

#include "command.hpp"
#include "errors.hpp"

#if GPUMEM_HAVE_CUDA
#include "gpumem/cuda/availability.hpp"
#include "cuda/hierarchy_bench.hpp"
#endif

namespace gpumem::tools {
namespace {

#if GPUMEM_HAVE_CUDA
void print_text(const hierarchy_result& r) {
  fmt::print("memory hierarchy on {} (medians)\n", r.device_name);
  for (const auto& f : r.figures) {
    if (f.bytes_per_s > 0)
      fmt::print("  {:<20} {:>10.1f} GB/s   {}\n", f.level, f.bytes_per_s / 1e9, f.what);
    else
      fmt::print("  {:<20} {:>10.1f} ns     {}\n", f.level, f.ns_per_access, f.what);
  }
  fmt::print("seed's claim: shared memory is ~100x (two orders of magnitude) faster than global.\n");
  fmt::print("  measured: shared/global bandwidth {:.1f}x, global/shared latency {:.1f}x\n",
             r.shared_over_global_bandwidth, r.global_over_shared_latency);
}

nlohmann::json to_json(const hierarchy_result& r) {
  nlohmann::json j;
  j["device_name"] = r.device_name;
  for (const auto& f : r.figures) {
    nlohmann::json fj{{"what", f.what}, {"median_ms", f.median_ms}};
    if (f.bytes_per_s > 0) fj["bytes_per_s"] = f.bytes_per_s;
    else fj["ns_per_access"] = f.ns_per_access;
    j["levels"][f.level] = fj;
  }
  j["shared_over_global_bandwidth_ratio"] = r.shared_over_global_bandwidth;
  j["global_over_shared_latency_ratio"] = r.global_over_shared_latency;
  j["seed_claimed_ratio"] = 100.0;
  return j;
}
#endif

const registrar reg{command{
    "bench-hierarchy", "Measure global/shared/register/local/constant memory on the device",
    [](CLI::App& sub, int& exit_code) {
      auto json = std::make_shared<bool>(false);
      auto reps = std::make_shared<int>(7);
      auto device = std::make_shared<int>(0);
      sub.add_flag("--json", *json, "One JSON object on its own line");
      sub.add_option("--reps", *reps, "Timed runs per figure; the median is reported")
          ->capture_default_str()
          ->check(CLI::Range(1, 1000));
      sub.add_option("--device", *device, "Device ordinal")->check(CLI::NonNegativeNumber)->capture_default_str();
      sub.footer("Needs a GPU (exit 2 without one).\n\nExample:\n  gpumem bench-hierarchy --reps 11 --json");
      sub.callback([json, reps, device, &exit_code] {
#if GPUMEM_HAVE_CUDA
        const gpu_status& gpu = gpu_available();
        if (!gpu) {
          print_error("bench-hierarchy", gpu.reason);
          exit_code = exit_unavailable;
          return;
        }
        if (*device >= gpu.device_count) {
          print_error("bench-hierarchy", "--device {}: only {} device(s) visible", *device, gpu.device_count);
          exit_code = exit_unavailable;
          return;
        }
        const hierarchy_result r = measure_hierarchy({*device, *reps});
        if (*json) fmt::print("{}\n", to_json(r).dump());
        else print_text(r);
        exit_code = exit_ok;
#else
        (void)json; (void)reps; (void)device;
        print_error("bench-hierarchy", "this build has no CUDA layer (configured without the CUDA toolkit)");
        exit_code = exit_unavailable;
#endif
      });
    }}};

}  // namespace
}  // namespace gpumem::tools
