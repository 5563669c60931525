#pragma once
// The goals gpumem's default is held to (issue "One default, fast and tight at once"), read off a
// bench run's figures: one line per goal with its figure, its bound and whether it is met, so a
// run says at a glance where the default stands. Figures of gpumem's own allocator (the first
// gpumem row of the run: gpumem-gpu on a GPU, gpumem-sim on the simulator); cudaMallocAsync's for
// the one goal measured against it.
#include <optional>
#include <string>
#include <vector>

#include "bench_patterns.hpp"

namespace gpumem::tools {

struct bench_goal {
  std::string id;         // stable key: "reserve", "warm_ns", "pair_ns", ... (JSON `goal`)
  std::string what;       // the figure, in words: "bert_infer_varlen.csv.gz: warm ns/op"
  std::string allocator;  // whose figure it is
  std::string device;
  std::string param;      // the row it belongs to: a trace, a size, a thread count; may be empty
  double value = 0;
  std::string unit;       // "ns/op", "x", "% of peak granules", "Mops/s", ...
  bool at_most = true;    // the figure must be <= bound (else >=)
  double bound = 0;
  // Met, not met, or not measured (nullopt: `note` says why, e.g. no cudaMallocAsync on the simulator).
  std::optional<bool> met;
  std::string note;
};

// The goals the run's figures allow, in a fixed order: per trace (reserve, first-pass granules,
// warm granules, warm ns/op, first-pass time vs cudaMallocAsync), then pair per size, churn,
// threads. Goals of patterns not run are left out.
std::vector<bench_goal> bench_goals(const std::vector<bench_result>& results);

// The table `gpumem bench` prints last, and a count of those met.
void print_goals(const std::vector<bench_goal>& goals);

// One JSON line (pattern "goal"), beside the figures' lines in --json / --json-out.
std::string to_json_line(const bench_goal& g);

}  // namespace gpumem::tools
