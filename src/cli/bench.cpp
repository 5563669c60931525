// `gpumem bench [pair|churn|threads|replay|all] [--simulate] [--json] [--json-out FILE] [--reps N]`: host-side
// speed of gpumem's pool against its peers, on the same patterns in the same process (issue
// "Speed"; patterns in bench_patterns.hpp). With a GPU (CUDA build): gpumem's gpu_pool, cudaMalloc,
// cudaMallocAsync and CUB's CachingDeviceAllocator. Without one, or with --simulate: gpumem's pool
// on the simulated device next to glibc malloc. More peers from shared libraries (--peer-lib,
// include/gpumem/bench_peer.h): PyTorch's caching allocator is bench/torch/torch_peer.cpp.
#include <fmt/core.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <system_error>
#include <thread>
#include <utility>

#include "gpumem/pool_option_table.hpp"
#include "gpumem/trace.hpp"
#include "bench_allocators.hpp"
#include "bench_patterns.hpp"
#include "bench_peer_plugin.hpp"
#include "command.hpp"
#include "errors.hpp"
#include "host_speed.hpp"
#include "pool_option_args.hpp"
#include "progress.hpp"
#include "trace_input.hpp"

#if GPUMEM_HAVE_CUDA
#include "gpumem/cuda/availability.hpp"
#endif

namespace gpumem::tools {
namespace {

struct bench_args {
  std::string pattern = "all";
  bool simulate = false;
  bool json = false;
  std::string json_out;  // --json-out: the JSON lines to this file, the tables to stdout
  int reps = 5;
  int rounds = 1;  // --rounds: the whole sweep this many times, allocators in turn
  std::vector<std::string> traces;
  std::vector<std::string> allocators;
  std::vector<std::string> peer_libs;  // --peer-lib
  bool no_auto_peers = false;          // --no-auto-peers
  pool_options pool;  // --max-reserved-bytes, --initial-reserve, ...
  bool settle = false;  // --settle
};

// The bundled example traces: installed beside the executable (PREFIX/share/gpumem/examples for
// PREFIX/bin/gpumem), else the source tree's when this is a build tree's executable. Empty: neither.
std::filesystem::path bundled_examples() {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const fs::path installed = exe.parent_path().parent_path() / "share" / "gpumem" / "examples";
    if (fs::is_directory(installed, ec)) return installed;
  }
#ifdef GPUMEM_SOURCE_EXAMPLES
  if (fs::is_directory(GPUMEM_SOURCE_EXAMPLES, ec)) return GPUMEM_SOURCE_EXAMPLES;
#endif
  return {};
}

// Trace files: those given (a folder: every *.csv and *.csv.gz in it), else those in
// $GPUMEM_TRACES, else in shared/traces or ../shared/traces from the current folder (the real
// traces, where they are), else the bundled examples. The device traces only: a pinned host trace
// (examples/pinned_host.csv) is for `gpumem doctor --pinned`.
std::vector<std::filesystem::path> trace_files(const bench_args& a) {
  namespace fs = std::filesystem;
  std::vector<fs::path> out;
  std::vector<fs::path> dirs;
  for (const auto& t : a.traces) {
    if (fs::is_directory(t)) dirs.emplace_back(t);
    else out.emplace_back(t);
  }
  if (a.traces.empty()) {
    if (const char* env = std::getenv("GPUMEM_TRACES"); env && *env) dirs.emplace_back(env);
    for (const char* d : {"shared/traces", "../shared/traces"})
      if (dirs.empty() && fs::is_directory(d)) dirs.emplace_back(d);
    if (dirs.empty()) {
      if (fs::path examples = bundled_examples(); !examples.empty()) {
        if (!a.json)
          fmt::print(stderr, "gpumem bench: replaying the bundled example traces in {}\n", examples.string());
        dirs.push_back(std::move(examples));
      }
    }
  }
  for (const auto& d : dirs) {
    std::vector<fs::path> found;
    for (const auto& e : fs::directory_iterator(d)) {
      const std::string name = e.path().filename().string();
      const bool trace_file = name.ends_with(".csv.gz") || name.ends_with(".csv");
      if (trace_file && !name.starts_with("pinned")) found.push_back(e.path());
    }
    std::sort(found.begin(), found.end());
    out.insert(out.end(), found.begin(), found.end());
  }
  return out;
}

void print_tables(const std::vector<bench_result>& results, int reps, int rounds) {
  // Rows in first-seen order per pattern; columns are allocators in first-seen order.
  std::vector<std::string> patterns, allocators;
  for (const auto& r : results) {
    if (std::find(patterns.begin(), patterns.end(), r.pattern) == patterns.end())
      patterns.push_back(r.pattern);
    if (std::find(allocators.begin(), allocators.end(), r.allocator) == allocators.end())
      allocators.push_back(r.allocator);
  }
  std::vector<std::string> ours;
  for (const auto& r : results)
    if (r.is_gpumem && std::find(ours.begin(), ours.end(), r.allocator) == ours.end()) {
      ours.push_back(r.allocator);
      // Which policy the figures are of: a table read later should not need the command line.
      fmt::print("{}: pool options {}\n", r.allocator, r.pool_options.empty() ? "the defaults" : r.pool_options);
    }

  for (const auto& pat : patterns) {
    std::vector<std::string> params;
    std::map<std::pair<std::string, std::string>, const bench_result*> cell;
    bool higher = false;
    const char* unit = "";
    for (const auto& r : results) {
      if (r.pattern != pat) continue;
      higher = r.higher_is_better();
      unit = r.unit_key();
      const std::string p = r.param();
      if (std::find(params.begin(), params.end(), p) == params.end()) params.push_back(p);
      cell[{p, r.allocator}] = &r;
    }
    std::vector<std::string> cols;
    for (const auto& a : allocators)
      for (const auto& p : params)
        if (cell.count({p, a})) {
          cols.push_back(a);
          break;
        }
    std::vector<std::pair<std::string, std::string>> ratios;  // (ours, peer)
    for (const auto& o : ours)
      if (std::find(cols.begin(), cols.end(), o) != cols.end())
        for (const auto& c : cols)
          if (c != o) ratios.emplace_back(o, c);

    std::string title = pat;
    if (pat == "churn") title += " (1000 live blocks, 256 B - 64 MiB)";
    if (pat == "threads") title += " (200 live blocks of 256 B - 1 MiB per thread, own stream each)";
    if (pat == "replay") title += " (first pass on a fresh allocator: growth included)";
    if (pat == "replay-warm") title += " (a second pass on the same allocator)";
    const std::string how = rounds > 1 ? fmt::format("median of {} rounds, each the median of up to {} runs", rounds, reps)
                                       : fmt::format("median of up to {} runs", reps);
    fmt::print("\n{}: {}, {}; ratio = how many times faster gpumem is\n", title, unit, how);
    fmt::print("  {:<24}", "");
    for (const auto& c : cols) fmt::print(" {:>18}", c);
    for (const auto& [o, c] : ratios) fmt::print(" {:>22}", "vs " + c);
    fmt::print("\n");
    for (const auto& p : params) {
      fmt::print("  {:<24}", p.empty() ? pat : p);
      for (const auto& c : cols) {
        auto it = cell.find({p, c});
        if (it == cell.end()) fmt::print(" {:>18}", "-");
        else if (!it->second->error.empty()) fmt::print(" {:>18}", "error");
        else fmt::print(" {:>18.4g}", it->second->value);
      }
      for (const auto& [o, c] : ratios) {
        auto a = cell.find({p, o}), b = cell.find({p, c});
        if (a == cell.end() || b == cell.end() || !a->second->error.empty() ||
            !b->second->error.empty() || a->second->value <= 0 || b->second->value <= 0) {
          fmt::print(" {:>22}", "-");
          continue;
        }
        const double x = higher ? a->second->value / b->second->value
                                : b->second->value / a->second->value;
        fmt::print(" {:>21.2f}x", x);
      }
      fmt::print("\n");
    }
    // What gpumem's speed cost in memory, beside it: peak reserved / peak live and granules moved.
    for (const auto& o : ours) {
      std::string line;
      for (const auto& p : params)
        if (auto it = cell.find({p, o}); it != cell.end() && it->second->reserve_over_live > 0)
          line += fmt::format("{}{} {:.3f} ({})", line.empty() ? "" : ", ", p.empty() ? pat : p,
                              it->second->reserve_over_live, it->second->granules_moved);
      if (!line.empty())
        fmt::print("  {}: peak reserved / peak live (granules moved): {}\n", o, line);
    }
  }
  // The host's speed before each pattern (host_speed.hpp): over the run, and where gpumem's own
  // figures were taken. A spread well over 1.1x says the host changed speed under the run: compare
  // figures taken at like speeds, or run again.
  double lo = 0, hi = 0;
  for (const auto& r : results)
    if (r.host_ns > 0) {
      lo = lo == 0 ? r.host_ns : std::min(lo, r.host_ns);
      hi = std::max(hi, r.host_ns);
    }
  if (hi > 0) {
    fmt::print("\nhost speed: a simulated 512 B alloc+free pair took {:.1f}-{:.1f} ns before the patterns ({:.2f}x)\n", lo,
               hi, hi / lo);
    for (const auto& o : ours) {
      std::string line, last_pattern;
      for (const auto& r : results)
        if (r.allocator == o && r.host_ns > 0 && r.pattern != last_pattern && r.pattern != "replay-warm") {
          line += fmt::format("{}{} {:.1f}", line.empty() ? "" : ", ", r.pattern, r.host_ns);
          last_pattern = r.pattern;
        }
      fmt::print("  before {}'s: {}\n", o, line);
    }
  }
  for (const auto& r : results)
    if (!r.error.empty()) print_error("bench", "{} {} {}: {}", r.pattern, r.param(), r.allocator, r.error);
}

int run_bench(const bench_args& args) {
  bool on_gpu = false;
#if GPUMEM_HAVE_CUDA
  if (!args.simulate) {
    const gpu_status& gpu = gpu_available();
    if (gpu) on_gpu = true;
    else if (!args.json)
      fmt::print(stderr, "gpumem bench: no GPU ({}); running on the simulated device\n", gpu.reason);
  }
#else
  if (!args.simulate && !args.json)
    fmt::print(stderr, "gpumem bench: this build has no CUDA layer; running on the simulated device\n");
#endif
  std::vector<bench_allocator_maker> makers;
#if GPUMEM_HAVE_CUDA
  if (on_gpu) makers = gpu_bench_allocators(args.pool);
#endif
  if (!on_gpu) makers = cpu_bench_allocators(args.pool);
  // Peers from shared libraries join the run whose device they work on. One named with --peer-lib
  // that cannot take part is an error before anything is timed, not a column quietly missing; one
  // found beside the executable (peer_libs_beside) is left out with a note.
  std::vector<std::pair<std::filesystem::path, bool>> libs;  // path, named with --peer-lib
  for (const auto& path : args.peer_libs) libs.emplace_back(path, true);
  if (!args.no_auto_peers)
    for (const auto& found : peer_libs_beside()) {
      const bool named = std::any_of(args.peer_libs.begin(), args.peer_libs.end(), [&](const std::string& p) {
        std::error_code ec;
        return std::filesystem::equivalent(p, found, ec);
      });
      if (!named) libs.emplace_back(found, false);
    }
  for (const auto& [path, named] : libs) {
    const std::string how = named ? "--peer-lib " + path.string() : path.string() + " (found beside gpumem)";
    bench_peer_lib lib;
    std::string why, left_out = "; left out";
    try {
      lib = load_bench_peer(path);
      if ((lib.device == "gpu") != on_gpu)
        why = fmt::format("its peer {} works on the {}, and this run is on {}", lib.maker.name,
                          lib.device == "gpu" ? "GPU" : "host", on_gpu ? "the GPU" : "the simulated device");
      else if (std::any_of(makers.begin(), makers.end(),
                           [&](const bench_allocator_maker& m) { return m.name == lib.maker.name; }))
        why = fmt::format("a peer named {} is in the run already", lib.maker.name);
    } catch (const std::exception& e) {
      why = e.what();
      left_out += " (--no-auto-peers skips the search)";
    }
    if (!why.empty() && named) {
      print_error("bench", "{}: {}", how, why);
      return exit_unavailable;
    }
    if (!why.empty()) {
      fmt::print(stderr, "gpumem bench: {}: {}{}\n", how, why, left_out);
      continue;
    }
    makers.push_back(std::move(lib.maker));
  }
  std::string gpumem_options_text = changed_pool_options(args.pool);
  if (args.settle) gpumem_options_text += gpumem_options_text.empty() ? "settle=1" : ",settle=1";
  if (!args.allocators.empty()) {
    std::erase_if(makers, [&](const bench_allocator_maker& m) {
      return std::find(args.allocators.begin(), args.allocators.end(), m.name) == args.allocators.end();
    });
    if (makers.empty()) {
      print_error("bench", "--allocator: no allocator of this run is called that");
      return exit_unavailable;
    }
  }

  const bool all = args.pattern == "all";
  std::vector<trace> traces;
  if (all || args.pattern == "replay") {
    if (const std::string twice = stdin_named_twice(args.traces); !twice.empty()) {
      print_error("bench", "--traces: {}", twice);
      return exit_unavailable;
    }
    for (const auto& f : trace_files(args)) {
      try {
        traces.push_back(load_trace(f.string()));
      } catch (const trace_error& e) {
        print_error("bench", e.what());
        return exit_unavailable;
      }
    }
    if (traces.empty())
      fmt::print(stderr, "gpumem bench: no traces found (give --traces DIR or set GPUMEM_TRACES); "
                         "replay skipped\n");
  }

  bench_config cfg;
  cfg.reps = args.reps;
  cfg.settle_between_passes = args.settle;
  // Opened before anything is timed: a path that cannot be written fails now, not after an hour of runs.
  std::ofstream json_file;
  if (!args.json_out.empty()) {
    json_file.open(args.json_out, std::ios::trunc);
    if (!json_file) {
      print_error("bench", "--json-out {}: cannot open it for writing", args.json_out);
      return exit_unavailable;
    }
  }
  // Progress on a terminal: one step per (round, allocator, pattern).
  const int patterns_run = all ? 4 : 1;
  const std::uint64_t steps =
      makers.size() * static_cast<std::uint64_t>(patterns_run) * static_cast<std::uint64_t>(args.rounds);
  std::uint64_t done = 0;
  progress_bar bar("bench", "steps");
  auto emit = [&](const bench_result& r) {
    if (!args.json && !json_file.is_open()) return;
    const std::string line = to_json_line(r);
    if (args.json) fmt::print("{}\n", line);
    if (json_file.is_open()) json_file << line << '\n' << std::flush;  // kept if a later run dies
  };
  // With --rounds, the allocators take turns: every round runs each of them once, the even rounds in
  // reverse order, so a host that changes speed under the run (shared hosts do, within seconds)
  // weighs on each allocator alike; a figure is then the median of its rounds.
  std::vector<std::vector<bench_result>> rounds;
  for (int round = 1; round <= args.rounds; ++round) {
    std::vector<const bench_allocator_maker*> order;
    for (const auto& m : makers) order.push_back(&m);
    if (round % 2 == 0) std::reverse(order.begin(), order.end());
    std::vector<bench_result>& results = rounds.emplace_back();
    for (const bench_allocator_maker* mp : order) {
      const bench_allocator_maker& m = *mp;
      if (!args.json) fmt::print(stderr, "gpumem bench: {}...\n", m.name);
      std::vector<bench_result> got;
      try {
        // A fresh allocator for every pattern: what one pattern leaves cached (churn leaves
        // gigabytes) must not speed up or slow down the next.
        double host_ns = 0;  // the host's speed before the pattern: see host_speed.hpp
        auto add = [&](std::vector<bench_result> v) {
          for (auto& r : v) {
            if (r.is_gpumem) r.pool_options = gpumem_options_text;
            r.host_ns = host_ns;
            if (args.rounds > 1) r.round = round;
            emit(r);
            got.push_back(std::move(r));
          }
          std::fflush(stdout);
          bar(++done, steps);
        };
        auto probe = [&] { host_ns = host_ns_per_sim_pair(); };
        if (all || args.pattern == "pair") probe(), add(bench_pair(*m.make(), cfg));
        if (all || args.pattern == "churn") probe(), add(bench_churn(*m.make(), cfg));
        if (all || args.pattern == "threads") probe(), add(bench_threads(*m.make(), cfg));
        if (all || args.pattern == "replay") {
          probe();
          std::unique_ptr<bench_allocator> current;
          add(bench_replay(
              [&]() -> bench_allocator& {
                current.reset();  // the last one's memory goes back before the next one starts
                current = m.make();
                return *current;
              },
              traces, cfg));
        }
      } catch (const std::exception& e) {
        print_error("bench", "{}: {}", m.name, e.what());
      }
      results.insert(results.end(), got.begin(), got.end());
    }
  }
  // The first round's order of allocators is the tables' order of columns.
  std::vector<bench_result> results = args.rounds == 1 ? std::move(rounds.front()) : merge_rounds(rounds);
  if (args.rounds > 1)
    for (const auto& r : results) emit(r);
  bar.finish();
  if (!args.json) {
    fmt::print("gpumem bench on {} (host time; {} CPU threads)\n",
               on_gpu ? "the GPU" : "the simulated device", std::thread::hardware_concurrency());
    print_tables(results, args.reps, args.rounds);
  }
  if (json_file.is_open() && !json_file) {
    print_error("bench", "--json-out {}: writing failed", args.json_out);
    return exit_failure;
  }
  const bool failed = std::any_of(results.begin(), results.end(),
                                  [](const bench_result& r) { return !r.error.empty(); });
  return failed ? exit_failure : exit_ok;
}

const registrar reg{command{
    "bench", "Allocator speed: gpumem's pool against its peers on alloc/free patterns",
    [](CLI::App& sub, int& exit_code) {
      auto args = std::make_shared<bench_args>();
      sub.add_option("pattern", args->pattern, "pair | churn | threads | replay | all")
          ->capture_default_str()
          ->check(CLI::IsMember({"pair", "churn", "threads", "replay", "all"}));
      sub.add_flag("--simulate", args->simulate,
                   "Simulated device (gpumem) and malloc, even when a GPU is there");
      sub.add_flag("--json", args->json, "One JSON object per (pattern, size/threads/trace, allocator)");
      sub.add_option("--json-out", args->json_out,
                     "Also write the JSON lines of --json to this file, as each figure is measured, while the "
                     "tables go to the terminal");
      sub.add_option("--reps", args->reps, "Timed runs per figure; the median is reported")
          ->capture_default_str()
          ->check(CLI::Range(1, 1000));
      sub.add_option("--rounds", args->rounds,
                     "Run the whole sweep this many times, the allocators taking turns (reversed every other "
                     "round); each figure is the median of its rounds, every round's value in the JSON "
                     "(`round_values`). For hosts that change speed under a run")
          ->check(CLI::Range(1, 100))
          ->capture_default_str();
      sub.add_option("--traces", args->traces,
                     "Trace files or folders for replay, - for standard input (default: $GPUMEM_TRACES, "
                     "shared/traces or ../shared/traces, else the bundled examples)");
      sub.add_option("--allocator", args->allocators, "Only these allocators (by name)");
      sub.add_option("--peer-lib", args->peer_libs,
                     "A shared library offering one more peer (include/gpumem/bench_peer.h), timed in this process "
                     "beside the others, e.g. PyTorch's caching allocator (bench/torch/torch_peer.cpp)")
          ->check(CLI::ExistingFile);
      sub.add_flag("--no-auto-peers", args->no_auto_peers,
                   "Do not take the peer libraries (libgpumem_*_peer.so) found beside the gpumem executable or in "
                   "$GPUMEM_BENCH_PEER_DIR");
      add_pool_option_flags(sub, args->pool, "gpumem's pool");
      sub.add_flag("--settle", args->settle,
                   "gpumem's pool: pool::settle between the cold and the warm replay pass, as a job calls it where "
                   "a step ends (outside the clock; its rows say settle=1)");
      sub.footer(
          "Exit code: 0; 1 when a figure could not be measured (an error row); 2 on bad input.\n\n"
          "Examples:\n"
          "  gpumem bench pair --simulate --reps 3\n"
          "  gpumem bench replay --traces examples --json-out bench.jsonl");
      sub.callback([args, &exit_code] { exit_code = run_bench(*args); });
    }}};

}  // namespace
}  // namespace gpumem::tools
