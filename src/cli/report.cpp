// `gpumem report TRACE... [-o OUT] [--resource NAME]`: one self-contained HTML page per trace
// (replay figures, doctor's findings, timeline, segment map at peak, request sizes, largest blocks).
// One trace: OUT is the page (default report.html). Several: OUT is a folder (default: the current
// one) and each page is named after its trace. `-` reads a trace from standard input. Exit 0 when
// every page was written; 2 when a trace could not be read or a page not written (reported, and
// the other traces still run).
#include <fmt/core.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "gpumem/doctor.hpp"
#include "gpumem/pool_option_table.hpp"
#include "gpumem/replay.hpp"
#include "gpumem/report.hpp"
#include "gpumem/trace.hpp"
#include "command.hpp"
#include "errors.hpp"
#include "progress.hpp"
#include "trace_input.hpp"

namespace gpumem::tools {
namespace {

struct report_args {
  std::vector<std::string> traces;
  std::string output;  // empty: report.html for one trace, the current folder for several
  std::string resource = "pool";
  std::string capacity = "80G";
  std::string title;
  bool no_doctor_replay = false;
};

// The page's name for a trace among several: its file name without .gz and .csv, then .html.
std::string page_name(const std::string& path) {
  if (path == stdin_path) return "stdin.html";
  std::string name = std::filesystem::path(path).filename().string();
  for (const std::string_view ext : {".gz", ".csv"})
    if (name.size() > ext.size() && name.ends_with(ext)) name.resize(name.size() - ext.size());
  return name + ".html";
}

// Writes one page; false (reported) when the trace cannot be read or the page not written.
bool write_page(const report_args& a, const std::string& path, const std::string& output, std::size_t capacity) {
  trace t;
  try {
    t = load_trace(path);
  } catch (const trace_error& e) {
    print_error("report", e.what());
    return false;
  }
  replay_options o;
  o.resource = a.resource;
  o.capacity_bytes = capacity;
  o.timeline_points = 2000;
  o.segment_map_at_peak = true;
  replay_result r, plain;
  doctor_report d;
  report_options ropts;
  ropts.title = a.title;
  try {
    {
      progress_bar bar(fmt::format("replay {} ({})", t.name, a.resource));
      o.progress = std::ref(bar);
      r = replay(t, o);
      bar.finish();
    }
    {
      // The figures the header shows come from a replay as `gpumem replay` runs it: the one above
      // keeps a timeline and a segment map, which cost time per op of their own.
      replay_options p = o;
      p.timeline_points = 0;
      p.segment_map_at_peak = false;
      progress_bar bar(fmt::format("replay {} ({}, timed)", t.name, a.resource));
      p.progress = std::ref(bar);
      plain = replay(t, p);
      bar.finish();
    }
    o.progress = nullptr;

    doctor_options dopts;
    dopts.replay.capacity_bytes = o.capacity_bytes;
    if (!a.no_doctor_replay) dopts.replayer = [](const trace& tr, const replay_options& ro) { return replay(tr, ro); };
    {
      progress_bar bar(fmt::format("doctor {}", t.name));
      dopts.replay.progress = std::ref(bar);
      d = diagnose(t, dopts);
      bar.finish();
    }
    ropts.figures = &plain;
    {
      progress_bar bar(fmt::format("lifetimes {}", t.name));
      bar(0, 1);
      ropts.lifetimes = lifetimes_at_peak(t, r, o);
      bar.finish();
    }
  } catch (const std::exception& e) {
    print_error("report", "{}: {}", t.name, e.what());
    return false;
  }

  std::ofstream out(output, std::ios::binary);
  if (out) write_report_html(out, t, r, d, ropts);
  out.close();
  if (!out) {
    print_error("report", "{}: cannot write the page", output);
    return false;
  }
  fmt::print("{}: peak live {:.1f} MiB, peak reserved {:.1f} MiB ({:.3f}x), {} findings -> {}\n", t.name,
             double(r.peak_live_bytes) / (1 << 20), double(r.peak_reserved_bytes) / (1 << 20), r.fragmentation,
             d.findings.size(), output);
  std::fflush(stdout);
  return true;
}

int run(const report_args& a) {
  std::size_t capacity = 0;
  try {
    capacity = parse_byte_size(a.capacity);
  } catch (const std::invalid_argument& e) {
    print_error("report", "--capacity: {}", e.what());
    return exit_unavailable;
  }
  if (const std::string twice = stdin_named_twice(a.traces); !twice.empty()) {
    print_error("report", twice);
    return exit_unavailable;
  }
  // Where each page goes, worked out (and clashes refused) before any replay runs.
  std::vector<std::string> outputs;
  if (a.traces.size() == 1) {
    outputs.push_back(a.output.empty() ? "report.html" : a.output);
  } else {
    const std::filesystem::path folder = a.output.empty() ? "." : a.output;
    std::error_code ec;
    if (!std::filesystem::is_directory(folder, ec)) {
      print_error("report", "-o {}: with several traces -o names a folder for their pages, and this is not one",
                  folder.string());
      return exit_unavailable;
    }
    std::map<std::string, std::string> taken;  // page name -> the trace it belongs to
    for (const auto& path : a.traces) {
      const std::string page = page_name(path);
      if (auto [it, fresh] = taken.emplace(page, path); !fresh) {
        print_error("report", "{} and {} would both be written to {}: give them one at a time with -o", it->second,
                    path, page);
        return exit_unavailable;
      }
      outputs.push_back((folder / page).string());
    }
  }
  bool all_written = true;
  for (std::size_t i = 0; i < a.traces.size(); ++i)
    all_written &= write_page(a, a.traces[i], outputs[i], capacity);
  return all_written ? exit_ok : exit_unavailable;
}

const registrar reg{command{
    "report", "Write one self-contained HTML page about a trace: figures, findings, timeline, segment map",
    [](CLI::App& sub, int& exit_code) {
      auto args = std::make_shared<report_args>();
      sub.add_option("traces", args->traces, "trace files (RMM log CSV, plain or .gz; - reads standard input)")
          ->required();
      sub.add_option("-o,--output", args->output,
                     "one trace: the HTML file to write (default report.html); several: the folder for their "
                     "pages, each named after its trace (default: the current folder)");
      std::string names;
      for (const auto& n : replay_resources()) names += (names.empty() ? "" : ", ") + n;
      sub.add_option("--resource", args->resource, "resource to replay through: " + names)->capture_default_str();
      sub.add_option("--capacity", args->capacity, "simulated device capacity, e.g. 80G")->capture_default_str();
      sub.add_option("--title", args->title, "page title (default: gpumem report: TRACE)");
      sub.add_flag("--no-doctor-replay", args->no_doctor_replay,
                   "skip the doctor's findings that replay the trace through the pool (fragmentation and "
                   "slow-path-remapping, several replays each)");
      sub.footer(
          "Exit code: 0 when every page was written; 2 when a trace could not be read or a page not\n"
          "written (reported, and the other traces still run).\n\n"
          "Examples:\n"
          "  gpumem report examples/varlen_inference.csv -o varlen.html\n"
          "  gpumem report examples/small_training.csv examples/pitfalls.csv -o pages/");
      sub.callback([args, &exit_code] { exit_code = run(*args); });
    }}};

}  // namespace
}  // namespace gpumem::tools
