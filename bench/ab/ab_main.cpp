// bench/ab: several builds of gpumem timed in one process, taking turns in windows of about a
// millisecond, so that a host whose speed changes (the device hosts and this project's CI machine
// switch between two speeds ~1.8x apart within milliseconds to seconds, bench/RESULTS.md, sessions
// 21-23) slows every build alike. Each figure is the median over windows, and each build's ratio
// to the first build is the median of the ratios of adjacent windows (one window of each build,
// back to back, in an order that rotates).
//
// Built by scripts/ab_build.sh, which compiles ab_variant.inc once per build, against that build's
// headers and library, renamed to namespace gpumem_vN.
//   ab [--windows N] [--layouts L] [--ops N] [--default-policy] pair:512 pair:16M churn replay:PATH ...
// Figures are ns per operation (an alloc or a free: half a pair). --ops: a window's operations
// (a replay's window is one warm pass whatever it says).
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <functional>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "ab_api.hpp"
#include "count_arg.hpp"

volatile std::uintptr_t ab::sink;

namespace {

double quantile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  return v[static_cast<std::size_t>(q * static_cast<double>(v.size() - 1) + 0.5)];
}

// A count on the command line (`--windows`, `--layouts`): a whole number from 1 up, read by the
// CLI's own parser, so "abc" or "0" is refused with the reason instead of read as some default.
int count_arg(const char* option, const std::string& text) {
  const std::uint64_t n = gpumem::tools::parse_count(text);
  if (n < 1 || n > static_cast<std::uint64_t>(std::numeric_limits<int>::max()))
    throw std::invalid_argument(std::string(option) + " " + text + ": must be from 1 to " +
                                std::to_string(std::numeric_limits<int>::max()));
  return static_cast<int>(n);
}

}  // namespace

int main(int argc, char** argv) try {
  int windows = 1001;
  int layouts = 10;  // at most the windows, unless given
  bool layouts_given = false;
  std::size_t ops = 20000;
  bool grow_first = true;
  std::vector<ab::pattern> patterns;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--windows" && i + 1 < argc) {
      windows = count_arg("--windows", argv[++i]);
    } else if (a == "--ops" && i + 1 < argc) {
      ops = ab_variants[0].parse_bytes(argv[++i]);
    } else if (a == "--layouts" && i + 1 < argc) {
      layouts = count_arg("--layouts", argv[++i]);
      layouts_given = true;
    } else if (a == "--default-policy") {
      grow_first = false;
    } else {
      ab::pattern p;
      const auto colon = a.find(':');
      p.kind = a.substr(0, colon);
      const std::string arg = colon == std::string::npos ? "" : a.substr(colon + 1);
      if (p.kind == "pair")
        p.size = ab_variants[0].parse_bytes(arg.empty() ? "512" : arg);
      else
        p.trace = arg;
      patterns.push_back(p);
    }
  }
  if (!layouts_given) layouts = std::min(layouts, windows);
  if (patterns.empty() || windows < 3 || windows < layouts) {
    std::fprintf(stderr,
                 "usage: ab [--windows N>=3] [--layouts L<=N] [--ops N] [--default-policy] pair:SIZE | churn | "
                 "replay:TRACE ...\n");
    return 2;
  }
  std::printf("%zu builds, %d windows each over %d layouts, policy %s; ns per op (an alloc or a free), median [p10]; "
              "ratio to %s\n",
              ab_variant_count, windows, layouts, grow_first ? "growing first" : "default", ab_variants[0].name);
  for (ab::pattern p : patterns) {
    p.grow_first = grow_first;
    std::vector<std::vector<double>> ns(ab_variant_count), ratio(ab_variant_count);
    std::vector<std::vector<double>> layout_ratio(ab_variant_count);  // each layout's median ratio
    std::mt19937 rng(7);
    std::vector<std::unique_ptr<char[]>> pads;
    for (int l = 0; l < layouts; ++l) {
      // Where a build's hot structures fall relative to each other (4 KiB aliasing, cache sets)
      // moves its speed by up to ~15% on one size and not the next: each layout builds every pool
      // anew after a heap allocation of random size, in a random order, and the figures pool them.
      pads.push_back(std::make_unique<char[]>(std::uniform_int_distribution<std::size_t>(1, 1 << 16)(rng)));
      std::vector<std::size_t> order(ab_variant_count);
      for (std::size_t v = 0; v < order.size(); ++v) order[v] = v;
      std::shuffle(order.begin(), order.end(), rng);
      std::vector<std::unique_ptr<ab::pattern_runner>> runners(ab_variant_count);
      for (const std::size_t v : order) runners[v] = ab_variants[v].make(p);
      std::vector<std::vector<double>> here(ab_variant_count);
      for (int w = l; w < windows; w += layouts) {
        std::vector<double> t(ab_variant_count);
        for (std::size_t k = 0; k < ab_variant_count; ++k) {
          const std::size_t v = (k + static_cast<std::size_t>(w)) % ab_variant_count;  // rotate who goes first
          t[v] = runners[v]->window(ops);
        }
        for (std::size_t v = 0; v < ab_variant_count; ++v) {
          ns[v].push_back(t[v]);
          ratio[v].push_back(t[v] / t[0]);
          here[v].push_back(t[v] / t[0]);
        }
      }
      for (std::size_t v = 0; v < ab_variant_count; ++v)
        if (!here[v].empty()) layout_ratio[v].push_back(quantile(here[v], 0.5));
    }
    const std::string label = p.kind + (p.kind == "pair" ? ":" + std::to_string(p.size) : p.kind == "replay" ? ":" + p.trace.substr(p.trace.find_last_of('/') + 1) : "");
    std::printf("%s\n", label.c_str());
    for (std::size_t v = 0; v < ab_variant_count; ++v)
      std::printf("  %-24s %8.2f [%8.2f]  ratio %.3f (p25 %.3f, p75 %.3f; layouts %.3f-%.3f)\n", ab_variants[v].name,
                  quantile(ns[v], 0.5), quantile(ns[v], 0.1), quantile(ratio[v], 0.5), quantile(ratio[v], 0.25),
                  quantile(ratio[v], 0.75), quantile(layout_ratio[v], 0), quantile(layout_ratio[v], 1));
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "ab: %s\n", e.what());
  return 1;
}
