// gpumem replay TRACE... — a trace's requests through a resource on the simulated device.
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "gpumem/replay.hpp"
#include "gpumem/replay_figures.hpp"
#ifdef GPUMEM_HAVE_CUDA
#include "replay_targets.hpp"
#endif
#include "gpumem/pool_option_table.hpp"
#include "command.hpp"
#include "count_arg.hpp"
#include "errors.hpp"
#include "pool_option_args.hpp"
#include "progress.hpp"
#include "trace_input.hpp"

namespace gpumem::tools {
namespace {

struct replay_args {
  std::vector<std::string> traces;
  std::vector<std::string> resources{"pool"};
  std::string capacity = "80G";
  bool json = false;
  bool min_capacity = false;
  std::size_t passes = 1;
  std::string ops;           // --ops: a count; empty: --passes decides
  std::string verify_every;  // --verify-every: a count; empty: no integrity checks
  std::size_t device_lag = 0;  // --device-lag
  bool recorded_threads = false;  // --recorded-threads
  bool settle = false;            // --settle
  pool_options pool;  // --max-reserved-bytes, --initial-reserve, ...
};

// A CLI11 check that the text is a count, at least `minimum`: the message says what is wrong.
std::function<std::string(const std::string&)> count_at_least(std::uint64_t minimum) {
  return [minimum](const std::string& text) -> std::string {
    try {
      if (parse_count(text) < minimum) return fmt::format("'{}' must be at least {}", text, minimum);
      return {};
    } catch (const std::invalid_argument& e) {
      return e.what();
    }
  };
}
bool is_pool(const replay_result& r) { return replay_is_pool(r); }

nlohmann::json to_json(const replay_result& r) {
  // The scalar figures come from replay_figures, which the report's page shows too.
  nlohmann::json j{{"trace", r.trace}, {"resource", r.resource}};
  for (const auto& f : replay_figures(r)) {
    if (f.integral)
      j[f.key] = static_cast<std::uint64_t>(f.value);
    else
      j[f.key] = f.value;
  }
  if (r.passes > 1) {
    j["passes"] = r.passes;
    j["reserved_after_first_pass_bytes"] = r.reserved_after_first_pass_bytes;
    j["max_reserved_later_passes_bytes"] = r.max_reserved_later_passes_bytes;
    j["soak_growth"] = r.soak_growth;
    auto& log = j["pass_log"] = nlohmann::json::array();
    for (const auto& p : r.pass_log) {
      log.push_back({{"pass", p.pass + 1},
                     {"reserved_at_end_bytes", p.reserved_at_end_bytes},
                     {"peak_reserved_bytes", p.peak_reserved_bytes},
                     {"integrity_mismatches", p.integrity_mismatches},
                     {"granules_moved", p.granules_moved},
                     {"map_unmap_calls", p.map_unmap_calls},
                     {"driver_granules", p.driver_granules},
                     {"seconds", p.seconds}});
    }
  }
  if (r.integrity_checked) {
    j["verify_every"] = r.verify_every;
    j["overlap_checks"] = r.overlap_checks;
    j["overlaps"] = r.overlaps;
    j["misaligned"] = r.misaligned;
    j["verified_blocks"] = r.verified_blocks;
    j["mismatched_words"] = r.mismatched_words;
    j["integrity_mismatches"] = r.integrity_mismatches();
    j["integrity_notes"] = r.integrity_notes;
  }
  return j;
}

// The soak's lines under a table row: reserved flatness, then integrity with its first problems.
void print_soak(const replay_result& r) {
  if (r.passes > 1)
    fmt::print("  soak: {} passes, {} ops; peak reserved after pass 1 {} B, in later passes {} B: growth {:+.3f}%\n",
               r.passes, r.ops, r.reserved_after_first_pass_bytes, r.max_reserved_later_passes_bytes,
               100.0 * r.soak_growth);
  if (!r.integrity_checked) return;
  fmt::print("  integrity: {} blocks checked for overlap and alignment, {} verified ({}); overlaps {}, misaligned {}, "
             "mismatched words {}: {}\n",
             r.overlap_checks, r.verified_blocks,
             r.verify_every == 0   ? std::string("data check off")
             : r.verify_every == 1 ? std::string("every allocation")
                                   : fmt::format("1 in {} allocations", r.verify_every),
             r.overlaps, r.misaligned, r.mismatched_words, r.integrity_mismatches() ? "FAILED" : "ok");
  for (const auto& n : r.integrity_notes) fmt::print("    {}\n", n);
}

// The pool's driver work: on a GPU each granule mapped or unmapped is a driver call of tens of µs.
void print_upstream(const replay_result& r) {
  if (!is_pool(r)) return;
  fmt::print("  upstream: {:.2f} map + unmap calls per 1000 ops ({:.2f} granules mapped or unmapped); {} upstream allocations\n",
             r.per_1000_ops(r.stats.map_calls + r.stats.unmap_calls), r.per_1000_ops(r.stats.maps + r.stats.unmaps),
             r.stats.upstream_calls);
  if (r.stats.remap_ns || r.stats.remaps_deferred)
    fmt::print("  remap time budget: {:.3f} ms charged for moves, {} moves turned down\n",
               double(r.stats.remap_ns) / 1e6, r.stats.remaps_deferred);
  if (r.stats.stream_ordered_moves)
    fmt::print("  stream-ordered moves: {} granules mapped under their own stream's queued frees\n",
               r.stats.stream_ordered_moves);
  if (r.stats.driver_maps + r.stats.driver_unmaps < r.stats.maps + r.stats.unmaps)
    fmt::print("  kept mappings: the driver mapped or unmapped {:.2f} granules per 1000 ops (the rest moved back where "
               "they were still mapped, or are still mapped where they left)\n",
               r.per_1000_ops(r.stats.driver_maps + r.stats.driver_unmaps));
}

int run(const replay_args& a) {
  replay_options base;
  try {
    base.capacity_bytes = parse_byte_size(a.capacity);
  } catch (const std::invalid_argument& e) {
    print_error("replay", "--capacity: {}", e.what());
    return exit_unavailable;
  }
  base.passes = a.passes;
  base.pool = a.pool;
  base.device_lag_ops = a.device_lag;
  base.recorded_threads = a.recorded_threads;
  base.settle_between_passes = a.settle;
  if (!a.ops.empty()) base.min_ops = parse_count(a.ops);
  if (!a.verify_every.empty()) {
    base.check_integrity = true;
    base.verify_every = parse_count(a.verify_every);
  }
  if (const std::string twice = stdin_named_twice(a.traces); !twice.empty()) {
    print_error("replay", twice);
    return exit_unavailable;
  }
  // Every trace runs: one that cannot be read or replayed is reported and the next one goes on.
  bool any_failed = false, any_unusable = false;
  if (!a.json)
    fmt::print("{:<28} {:<14} {:>9} {:>14} {:>14} {:>8} {:>9} {:>7} {:>12}{}\n", "trace", "resource", "ops",
               "peak_live_B", "peak_reserved_B", "frag", "ns/op", "failed", "trace_failed",
               a.min_capacity ? "  min_capacity_B" : "");
  for (const auto& path : a.traces) {
    trace t;
    try {
      t = load_trace(path);
    } catch (const trace_error& e) {
      print_error("replay", e.what());
      any_unusable = true;
      continue;
    }
    for (const auto& res : a.resources) {
      replay_options o = base;
      o.resource = res;
      replay_result r;
      std::size_t minimum = 0;
      try {
        progress_bar bar(fmt::format("replay {} ({})", t.name, res));
        o.progress = std::ref(bar);
        r = replay(t, o);
        bar.finish();
        if (a.min_capacity) minimum = gpumem::min_capacity(t, o);
      } catch (const std::exception& e) {
        print_error("replay", "{} ({}): {}", t.name, res, e.what());
        any_unusable = true;
        continue;
      }
      any_failed |= r.failed_allocs > 0 || r.integrity_mismatches() > 0;
      if (a.json) {
        auto j = to_json(r);
        if (a.min_capacity) j["min_capacity_bytes"] = minimum;
        fmt::print("{}\n", j.dump());
      } else {
        fmt::print("{:<28} {:<14} {:>9} {:>14} {:>14} {:>8.3f} {:>9.1f} {:>7} {:>12}{}\n", r.trace, r.resource,
                   r.ops, r.peak_live_bytes, r.peak_reserved_bytes, r.fragmentation, r.ns_per_op, r.failed_allocs,
                   r.trace_failures, a.min_capacity ? fmt::format("  {:>14}", minimum) : "");
        print_soak(r);
        print_upstream(r);
      }
    }
  }
  return any_unusable ? exit_unavailable : any_failed ? exit_failure : exit_ok;
}

const registrar reg{command{
    "replay", "Replay allocation traces (RMM log CSV, plain or .gz) through a resource and measure it",
    [](CLI::App& sub, int& exit_code) {
#ifdef GPUMEM_HAVE_CUDA
      register_gpu_replay_targets();  // gpu-pool, gpu-pool-segments, cuda-malloc-async
#endif
      auto args = std::make_shared<replay_args>();
      sub.add_option("traces", args->traces, "trace files (RMM log CSV, plain or gzip; - reads standard input)")
          ->required();
      std::string names;
      for (const auto& n : replay_resources()) names += (names.empty() ? "" : ", ") + n;
      sub.add_option("--resource", args->resources,
                     "resource(s), comma separated: " + names +
                         " (the gpu-* ones and cuda-malloc-async run on the GPU, the others on the simulated device)")
          ->delimiter(',')
          ->capture_default_str();
      sub.add_option("--capacity", args->capacity, "device capacity, e.g. 80G")->capture_default_str();
      sub.add_flag("--json", args->json, "one JSON object per trace and resource, each on its own line");
      auto* passes =
          sub.add_option("--passes", args->passes, "replay each trace this many times back to back on one resource (a soak)")
              ->check(CLI::Range(1, 100000))
              ->capture_default_str();
      sub.add_option("--ops", args->ops, "a soak of at least this many operations (e.g. 1e8): as many passes as that takes")
          ->check(count_at_least(1))
          ->excludes(passes);
      sub.add_option("--verify-every", args->verify_every,
                     "check integrity: every block for overlap with the live ones and alignment, and every K-th "
                     "allocation's data (stamped after allocation, checked before free; 0: no data check)")
          ->check(count_at_least(0));
      sub.add_option("--device-lag", args->device_lag,
                     "pool and pool-segments: the simulated device finishes queued work only every N operations, "
                     "as a GPU running behind the host (0, the default: at once)")
          ->check(CLI::Range(std::size_t{0}, std::size_t{1} << 40))
          ->capture_default_str();
      sub.add_flag("--recorded-threads", args->recorded_threads,
                   "issue each row on a thread of its own for each thread the trace names, in trace order (a "
                   "pool keeps a front cache per thread; PyTorch's backward runs on a thread of its own): for "
                   "memory figures, the time per op is then mostly the threads' handovers");
      sub.add_flag("--settle", args->settle,
                   "pool resources, with --passes or --ops: pool::settle between passes, as a job calls it where "
                   "each step ends (cached blocks and empty slabs back to the pool's free memory, nothing to the "
                   "device), so each pass starts from the layout the first started from");
      add_pool_option_flags(sub, args->pool, "pool resources");
      sub.add_flag("--min-capacity", args->min_capacity,
                   "also find the smallest capacity (to the 2 MiB granule) that runs the trace with no failure");
      sub.footer(
          "Exit code: 0; 1 when a request failed in the replay or an integrity check found a problem; 2 when a\n"
          "trace could not be read or replayed (reported, and the other traces still run).\n"
          "The table's `failed` counts the replay's failed requests, `trace_failed` the trace's own\n"
          "`allocate failure` rows.\n\n"
          "Examples:\n"
          "  gpumem replay examples/vision_two_streams.csv --resource pool,pool-segments\n"
          "  zcat job.csv.gz | gpumem replay - --passes 10 --verify-every 256 --json");
      sub.callback([args, &exit_code] { exit_code = run(*args); });
    }}};

}  // namespace
}  // namespace gpumem::tools
