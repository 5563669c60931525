// `gpumem doctor TRACE... [--json] [--no-replay] [--pinned PINNED_TRACE [--pinned-cap BYTES]]`:
// diagnoses allocation traces (the findings are documented in include/gpumem/doctor.hpp). Exit 0
// when every trace was diagnosed, findings or not; 2 when a trace could not be read or diagnosed
// (reported on stderr, and the other traces still run). `-` reads a trace from standard input.
// A pinned trace belongs to one job, so it pairs with exactly one device trace; if it cannot be
// read nothing is diagnosed (a report without the pinned finding asked for would pass for a
// clean one).
#include <fmt/core.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "gpumem/doctor.hpp"
#include "gpumem/replay.hpp"
#include "gpumem/trace.hpp"
#include "gpumem/pool_option_table.hpp"
#include "command.hpp"
#include "errors.hpp"
#include "trace_input.hpp"

namespace gpumem::tools {
namespace {

struct doctor_args {
  std::vector<std::string> traces;
  bool json = false;
  bool no_replay = false;
  std::string pinned;      // pinned host trace; empty: none
  std::string pinned_cap;  // as typed (e.g. 8GiB); empty: the default cap
};

nlohmann::ordered_json to_json(const doctor_report& r) {
  nlohmann::ordered_json j;
  j["trace"] = r.trace;
  j["rows"] = r.rows;
  j["allocations"] = r.allocations;
  j["frees"] = r.frees;
  j["allocate_failures"] = r.allocate_failures;
  j["duration_seconds"] = r.duration_seconds;
  j["peak_live_bytes"] = r.peak_live_bytes;
  j["device_bytes"] = r.device_bytes;
  j["job_seconds"] = r.job_seconds;
  j["job_seconds_estimated"] = r.job_seconds_estimated;
  j["pinned_trace"] = r.pinned_trace.empty() ? nlohmann::ordered_json() : nlohmann::ordered_json(r.pinned_trace);
  j["worst_severity"] = to_string(r.worst());
  j["findings"] = nlohmann::ordered_json::array();
  for (const auto& f : r.findings) {
    nlohmann::ordered_json jf;
    jf["id"] = f.id;
    jf["severity"] = to_string(f.level);
    jf["summary"] = f.summary;
    jf["cost"] = {{"bytes", f.cost_bytes}, {"seconds", f.cost_seconds}, {"share", f.cost_share}};
    nlohmann::ordered_json figs = nlohmann::ordered_json::object();
    for (const auto& g : f.figures) {
      if (g.integral)
        figs[g.key] = static_cast<std::uint64_t>(std::llround(g.value));
      else
        figs[g.key] = g.value;
    }
    jf["figures"] = std::move(figs);
    jf["advice"] = f.advice;
    j["findings"].push_back(std::move(jf));
  }
  j["skipped"] = r.skipped;
  return j;
}

std::string mib(std::uint64_t bytes) { return fmt::format("{:.1f} MiB", static_cast<double>(bytes) / (1 << 20)); }

void print_table(const doctor_report& r) {
  fmt::print("{}: {} rows ({} allocations, {} frees, {} failures) over {:.3f} s, peak live {}\n",
             r.trace, r.rows, r.allocations, r.frees, r.allocate_failures, r.duration_seconds,
             mib(r.peak_live_bytes));
  if (!r.pinned_trace.empty()) fmt::print("  pinned host allocations from {}\n", r.pinned_trace);
  if (r.findings.empty()) fmt::print("  no findings\n");
  // The library lists the findings costliest first; each line says what it costs the job.
  for (const finding& f : r.findings) {
    std::string cost;
    if (f.cost_share >= 1.0)
      cost = "the job fails";
    else if (f.cost_bytes > 0 || f.cost_seconds > 0)
      cost = fmt::format("{} of the {}", f.cost_share < 1e-4 ? std::string("<0.01%") : fmt::format("{:.2g}%", 100 * f.cost_share),
                         f.cost_bytes > 0 ? fmt::format("{:.0f} GiB device", double(r.device_bytes) / (1 << 30))
                                          : std::string(r.job_seconds_estimated ? "job's estimated time" : "job's time"));
    else
      cost = "no cost";
    fmt::print("  {:<8} {:<21} [{}] {}\n", to_string(f.level), f.id, cost, f.summary);
    // Advice only where something needs doing; an info finding's summary says enough.
    if (f.level > severity::info) fmt::print("  {:<8} {:<21} advice: {}\n", "", "", f.advice);
  }
  for (const auto& s : r.skipped) fmt::print("  skipped  {}\n", s);
  fmt::print("\n");
}

// The pinned trace and its cap, checked before any device trace is read. False (with the reason on
// stderr) when they are unusable.
bool set_up_pinned(const doctor_args& args, trace& pinned, doctor_options& opts) {
  if (args.pinned.empty()) return true;
  if (args.traces.size() != 1) {
    print_error("doctor", "--pinned pairs one pinned trace with one device trace, but {} device traces were given",
                args.traces.size());
    return false;
  }
  if (!args.pinned_cap.empty()) {
    try {
      opts.pinned_cap_bytes = parse_byte_size(args.pinned_cap);
    } catch (const std::invalid_argument& e) {
      print_error("doctor", "--pinned-cap: {}", e.what());
      return false;
    }
    if (opts.pinned_cap_bytes == 0) {
      print_error("doctor", "--pinned-cap: the cap must be above 0 bytes");
      return false;
    }
  }
  try {
    pinned = load_trace(args.pinned);
  } catch (const trace_error& e) {
    print_error("doctor", e.what());
    return false;
  }
  opts.pinned = &pinned;
  return true;
}

int run(const doctor_args& args) {
  doctor_options opts;
  if (!args.no_replay) opts.replayer = [](const trace& t, const replay_options& o) { return replay(t, o); };
  std::vector<std::string> inputs = args.traces;
  if (!args.pinned.empty()) inputs.push_back(args.pinned);
  if (const std::string twice = stdin_named_twice(inputs); !twice.empty()) {
    print_error("doctor", twice);
    return exit_unavailable;
  }
  trace pinned;
  if (!set_up_pinned(args, pinned, opts)) return exit_unavailable;
  int rc = exit_ok;
  for (const auto& path : args.traces) {
    doctor_report report;
    try {
      const trace t = load_trace(path);
      report = diagnose(t, opts);
    } catch (const trace_error& e) {
      print_error("doctor", e.what());
      rc = exit_unavailable;
      continue;
    } catch (const std::exception& e) {
      print_error("doctor", "{}: {}", path == stdin_path ? std::string(stdin_name) : path, e.what());
      rc = exit_unavailable;
      continue;
    }
    if (args.json)
      fmt::print("{}\n", to_json(report).dump());
    else
      print_table(report);
  }
  return rc;
}

const registrar reg{{"doctor", "Diagnose allocation traces: churn, fragmentation, leaks, failures, ...",
                     [](CLI::App& sub, int& exit_code) {
                       auto args = std::make_shared<doctor_args>();
                       sub.add_option("traces", args->traces,
                                      "RMM log CSV traces, plain or gzip (- reads standard input)")
                           ->required();
                       sub.add_flag("--json", args->json, "One JSON object per trace, one per line");
                       sub.add_flag("--no-replay", args->no_replay,
                                    "Skip the findings that replay the trace through the pool (fragmentation "
                                    "and slow-path-remapping, several replays each); the report lists them as "
                                    "skipped");
                       CLI::Option* pinned = sub.add_option(
                           "--pinned", args->pinned,
                           "Pinned host allocations of the same job (RMM log CSV, as trace_adaptor "
                           "writes around pinned_host_resource): adds the pinned-memory finding");
                       sub.add_option("--pinned-cap", args->pinned_cap,
                                      "The pinned cap to judge against, e.g. 8GiB (default: 20% of "
                                      "this machine's RAM, pinned_host_resource's default)")
                           ->needs(pinned);
                       sub.footer(
                           "Exit code: 0 when every trace was diagnosed, findings or not; 2 when one could not "
                           "be\nread (reported, and the other traces still run).\n\n"
                           "Examples:\n"
                           "  gpumem doctor examples/pitfalls.csv\n"
                           "  gpumem doctor examples/small_training.csv --pinned examples/pinned_host.csv "
                           "--pinned-cap 8GiB\n"
                           "  zcat job.csv.gz | gpumem doctor --json -");
                       sub.callback([args, &exit_code] { exit_code = run(*args); });
                     }}};

}  // namespace
}  // namespace gpumem::tools
