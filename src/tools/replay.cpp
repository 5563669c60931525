// gpumem replay TRACE... — a trace's requests through a resource on the simulated device.
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "gpumem/replay.hpp"
#ifdef GPUMEM_HAVE_CUDA
#include "gpumem/cuda/replay_targets.hpp"
#endif
#include "tools/byte_size.hpp"
#include "tools/command.hpp"
#include "tools/progress.hpp"

namespace gpumem::tools {
namespace {

struct replay_args {
  std::vector<std::string> traces;
  std::vector<std::string> resources{"pool"};
  std::string capacity = "80G";
  bool simulate = true;
  bool json = false;
  bool min_capacity = false;
  std::size_t passes = 1;
};

bool is_pool(const replay_result& r) { return r.resource.rfind("pool", 0) == 0 || r.resource.rfind("gpu-pool", 0) == 0; }
double per_1000_ops(const replay_result& r, std::uint64_t n) { return r.ops ? 1000.0 * double(n) / double(r.ops) : 0.0; }

nlohmann::json to_json(const replay_result& r) {
  nlohmann::json j{{"trace", r.trace},
                   {"resource", r.resource},
                   {"ops", r.ops},
                   {"peak_live_bytes", r.peak_live_bytes},
                   {"peak_reserved_bytes", r.peak_reserved_bytes},
                   {"final_reserved_bytes", r.final_reserved_bytes},
                   {"fragmentation", r.fragmentation},
                   {"ns_per_op", r.ns_per_op},
                   {"failed_allocs", r.failed_allocs},
                   {"trace_failures", r.trace_failures}};
  if (r.reserved_after_first_pass_bytes) {
    j["passes"] = r.passes;
    j["reserved_after_first_pass_bytes"] = r.reserved_after_first_pass_bytes;
    j["soak_growth"] = r.soak_growth;
  }
  if (is_pool(r)) {
    j["upstream_calls"] = r.stats.upstream_calls;
    j["maps"] = r.stats.maps;
    j["unmaps"] = r.stats.unmaps;
    j["events_recorded"] = r.stats.events_recorded;
    j["map_calls"] = r.stats.map_calls;
    j["unmap_calls"] = r.stats.unmap_calls;
    j["map_unmap_calls_per_1000_ops"] = per_1000_ops(r, r.stats.map_calls + r.stats.unmap_calls);
    j["granules_mapped_unmapped_per_1000_ops"] = per_1000_ops(r, r.stats.maps + r.stats.unmaps);
  }
  return j;
}

// The pool's driver work: on a GPU each granule mapped or unmapped costs tens of µs (design notes).
void print_upstream(const replay_result& r) {
  if (!is_pool(r)) return;
  fmt::print("  upstream: {:.2f} map + unmap calls per 1000 ops ({:.2f} granules mapped or unmapped); {} upstream allocations\n",
             per_1000_ops(r, r.stats.map_calls + r.stats.unmap_calls), per_1000_ops(r, r.stats.maps + r.stats.unmaps),
             r.stats.upstream_calls);
}

int run(const replay_args& a) {
  replay_options base;
  base.capacity_bytes = parse_byte_size(a.capacity);
  bool any_failed = false;
  if (!a.json)
    fmt::print("{:<28} {:<14} {:>9} {:>14} {:>14} {:>8} {:>9} {:>7}{}\n", "trace", "resource", "ops",
               "peak_live_B", "peak_reserved_B", "frag", "ns/op", "failed", a.min_capacity ? "  min_capacity_B" : "");
  for (const auto& path : a.traces) {
    const trace t = read_trace(path);
    for (const auto& res : a.resources) {
      replay_options o = base;
      o.resource = res;
      o.passes = a.passes;
      progress_bar bar(fmt::format("replay {} ({})", t.name, res));
      o.progress = std::ref(bar);
      replay_result r = replay(t, o);
      bar.finish();
      any_failed |= r.failed_allocs > 0;
      std::size_t minimum = 0;
      if (a.min_capacity) minimum = gpumem::min_capacity(t, o);
      if (a.json) {
        auto j = to_json(r);
        if (a.min_capacity) j["min_capacity_bytes"] = minimum;
        fmt::print("{}\n", j.dump());
      } else {
        fmt::print("{:<28} {:<14} {:>9} {:>14} {:>14} {:>8.3f} {:>9.1f} {:>7}{}{}\n", r.trace, r.resource, r.ops,
                   r.peak_live_bytes, r.peak_reserved_bytes, r.fragmentation, r.ns_per_op, r.failed_allocs,
                   a.min_capacity ? fmt::format("  {:>14}", minimum) : "",
                   r.reserved_after_first_pass_bytes
                       ? fmt::format("  soak: reserved after pass 1 {} B, growth over {} passes {:+.3f}%",
                                     r.reserved_after_first_pass_bytes, a.passes, 100.0 * r.soak_growth)
                       : "");
        print_upstream(r);
      }
    }
  }
  return any_failed ? exit_failure : exit_ok;
}

const registrar reg{command{
    "replay", "Replay allocation traces (RMM log CSV, plain or .gz) through a resource and measure it",
    [](CLI::App& sub, int& exit_code) {
#ifdef GPUMEM_HAVE_CUDA
      register_gpu_replay_targets();  // gpu-pool, gpu-pool-segments, cuda-malloc-async
#endif
      auto args = std::make_shared<replay_args>();
      sub.add_option("traces", args->traces, "trace files")->required()->check(CLI::ExistingFile);
      std::string names;
      for (const auto& n : replay_resources()) names += (names.empty() ? "" : ", ") + n;
      sub.add_option("--resource", args->resources, "resource(s), comma separated: " + names)
          ->delimiter(',')
          ->capture_default_str();
      sub.add_flag("--simulate", args->simulate,
                   "accepted for clarity: pool, pool-segments, exact and malloc run on the simulated device; "
                   "gpu-pool, gpu-pool-segments and cuda-malloc-async on the GPU");
      sub.add_option("--capacity", args->capacity, "device capacity, e.g. 80G")->capture_default_str();
      sub.add_flag("--json", args->json, "one JSON object per trace and resource, each on its own line");
      sub.add_option("--passes", args->passes, "replay each trace this many times back to back on one resource (a soak)")
          ->check(CLI::Range(1, 100000));
      sub.add_flag("--min-capacity", args->min_capacity,
                   "also find the smallest capacity (to the 2 MiB granule) that runs the trace with no failure");
      sub.callback([args, &exit_code] { exit_code = run(*args); });
    }}};

}  // namespace
}  // namespace gpumem::tools
