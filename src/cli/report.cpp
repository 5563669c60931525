// `gpumem report TRACE -o report.html [--resource NAME]`: one self-contained HTML page about a trace
// (replay figures, doctor's findings, timeline, segment map at peak, request sizes, largest blocks).
// Exit 0 when the page was written; 2 when the trace could not be read or the page not written.
#include <fmt/core.h>

#include <fstream>
#include <string>

#include "gpumem/doctor.hpp"
#include "gpumem/replay.hpp"
#include "gpumem/report.hpp"
#include "gpumem/trace.hpp"
#include "gpumem/pool_option_table.hpp"
#include "command.hpp"
#include "progress.hpp"

namespace gpumem::tools {
namespace {

struct report_args {
  std::string trace;
  std::string output = "report.html";
  std::string resource = "pool";
  std::string capacity = "80G";
  std::string title;
  bool no_doctor_replay = false;
};

int run(const report_args& a) {
  trace t;
  try {
    t = read_trace(a.trace);
  } catch (const trace_error& e) {
    fmt::print(stderr, "gpumem report: {}\n", e.what());
    return exit_unavailable;
  }
  replay_options o;
  o.resource = a.resource;
  o.capacity_bytes = parse_byte_size(a.capacity);
  o.timeline_points = 2000;
  o.segment_map_at_peak = true;
  replay_result r;
  {
    progress_bar bar(fmt::format("replay {} ({})", t.name, a.resource));
    o.progress = std::ref(bar);
    r = replay(t, o);
    bar.finish();
  }
  o.progress = nullptr;

  doctor_options dopts;
  dopts.replay.capacity_bytes = o.capacity_bytes;
  if (!a.no_doctor_replay) dopts.replayer = [](const trace& tr, const replay_options& ro) { return replay(tr, ro); };
  doctor_report d;
  {
    progress_bar bar(fmt::format("doctor {}", t.name));
    dopts.replay.progress = std::ref(bar);
    d = diagnose(t, dopts);
    bar.finish();
  }

  report_options ropts;
  ropts.title = a.title;
  {
    progress_bar bar(fmt::format("lifetimes {}", t.name));
    bar(0, 1);
    ropts.lifetimes = lifetimes_at_peak(t, r, o);
    bar.finish();
  }

  std::ofstream out(a.output, std::ios::binary);
  if (out) write_report_html(out, t, r, d, ropts);
  out.close();
  if (!out) {
    fmt::print(stderr, "gpumem report: cannot write {}\n", a.output);
    return exit_unavailable;
  }
  fmt::print("{}: peak live {:.1f} MiB, peak reserved {:.1f} MiB ({:.3f}x), {} findings -> {}\n", t.name,
             double(r.peak_live_bytes) / (1 << 20), double(r.peak_reserved_bytes) / (1 << 20), r.fragmentation,
             d.findings.size(), a.output);
  return exit_ok;
}

const registrar reg{command{
    "report", "Write one self-contained HTML page about a trace: figures, findings, timeline, segment map",
    [](CLI::App& sub, int& exit_code) {
      auto args = std::make_shared<report_args>();
      sub.add_option("trace", args->trace, "trace file (RMM log CSV, plain or .gz)")->required()->check(CLI::ExistingFile);
      sub.add_option("-o,--output", args->output, "the HTML file to write")->capture_default_str();
      std::string names;
      for (const auto& n : replay_resources()) names += (names.empty() ? "" : ", ") + n;
      sub.add_option("--resource", args->resource, "resource to replay through: " + names)->capture_default_str();
      sub.add_option("--capacity", args->capacity, "simulated device capacity, e.g. 80G")->capture_default_str();
      sub.add_option("--title", args->title, "page title (default: gpumem report: TRACE)");
      sub.add_flag("--no-doctor-replay", args->no_doctor_replay,
                   "skip the doctor's fragmentation finding (it replays the trace twice more)");
      sub.callback([args, &exit_code] { exit_code = run(*args); });
    }}};

}  // namespace
}  // namespace gpumem::tools
