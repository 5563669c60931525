// `gpumem convert TRACE --to perfetto -o OUT.json [--resource NAME] [--capacity BYTES] [--live-only]`:
// a trace's timeline as Chrome trace / Perfetto JSON (include/gpumem/trace_perfetto.hpp), for
// ui.perfetto.dev and chrome://tracing. Exit 0 when the file was written; 2 when the trace could
// not be read or the file not written.
#include <fmt/core.h>

#include <fstream>
#include <stdexcept>
#include <string>

#include "gpumem/pool_option_table.hpp"
#include "gpumem/trace.hpp"
#include "gpumem/trace_perfetto.hpp"
#include "command.hpp"
#include "errors.hpp"
#include "trace_input.hpp"

namespace gpumem::tools {
namespace {

struct convert_args {
  std::string trace;
  std::string to;
  std::string output;
  std::string resource = "pool";
  std::string capacity = "80G";
  bool live_only = false;
};

int run(const convert_args& a) {
  trace t;
  try {
    t = load_trace(a.trace);
  } catch (const trace_error& e) {
    print_error("convert", e.what());
    return exit_unavailable;
  }
  perfetto_options o;
  o.reserved = !a.live_only;
  o.replay.resource = a.resource;
  o.replay.capacity_bytes = parse_byte_size(a.capacity);
  std::ofstream out(a.output, std::ios::binary);
  perfetto_summary s;
  if (out) s = write_perfetto_json(out, t, o);
  out.close();
  if (!out) {
    print_error("convert", "{}: cannot write the file", a.output);
    return exit_unavailable;
  }
  fmt::print("{}: {} events ({} allocations on {} stream tracks; live{} bytes) -> {}\n", t.name, s.events, s.slices,
             s.tracks, s.reserved ? " and reserved" : "", a.output);
  if (!s.note.empty()) fmt::print("  note: {}\n", s.note);
  return exit_ok;
}

const registrar reg{command{
    "convert", "Convert a trace to another format: --to perfetto (Chrome trace / Perfetto JSON timeline)",
    [](CLI::App& sub, int& exit_code) {
      auto args = std::make_shared<convert_args>();
      sub.add_option("trace", args->trace, "trace file (RMM log CSV, plain or .gz; - reads standard input)")->required();
      sub.add_option("--to", args->to, "output format")->required()->check(CLI::IsMember({"perfetto"}));
      sub.add_option("-o,--output", args->output, "the file to write")->required();
      std::string names;
      for (const auto& n : replay_resources()) names += (names.empty() ? "" : ", ") + n;
      sub.add_option("--resource", args->resource, "resource the reserved bytes are replayed through: " + names)
          ->capture_default_str();
      sub.add_option("--capacity", args->capacity, "simulated device capacity, e.g. 80G")->capture_default_str();
      sub.add_flag("--live-only", args->live_only, "no replay: live bytes only, no reserved counter");
      sub.footer(
          "Example:\n"
          "  gpumem convert examples/vision_two_streams.csv --to perfetto -o vision.json\n"
          "  (open vision.json in ui.perfetto.dev or chrome://tracing)\n"
          "Exit codes: 0 written; 2 the trace could not be read or the file not written.");
      sub.callback([args, &exit_code] { exit_code = run(*args); });
    }}};

}  // namespace
}  // namespace gpumem::tools
