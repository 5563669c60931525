// The goals of `gpumem bench`; see bench_goals.hpp.
#include "bench_goals.hpp"

#include <fmt/core.h>

#include <algorithm>
#include <cstdlib>
#include <nlohmann/json.hpp>

namespace gpumem::tools {
namespace {

// The bounds, as the issue sets them for the default options.
constexpr double reserve_bound = 1.03;           // peak reserved / peak live, every trace
constexpr double first_pass_granules_bound = 2;  // granules mapped in the first pass / the peak's
constexpr double warm_granules_pct_bound = 1;    // granules mapped + unmapped per warm pass, % of the peak's
constexpr double warm_ns_bound = 40;             // warm host ns/op
constexpr double vs_async_bound = 0.7;           // first-pass ns/op / cudaMallocAsync's
constexpr double pair_ns_bound = 25;             // every size
constexpr double churn_ns_bound = 80;
constexpr double churn_reserve_bound = 1.10;
constexpr double threads_mops_bound = 50;        // at 16 threads
constexpr double threads_scaling_bound = 8;      // 16 threads / 1 thread

const char* async_peer = "cuda-malloc-async";

double six_digits(double v) { return std::strtod(fmt::format("{:.6g}", v).c_str(), nullptr); }

class goal_list {
 public:
  explicit goal_list(std::vector<bench_goal>& out) : out_(out) {}
  // A goal on row `r`: measured when the row has no error.
  void add(const bench_result& r, std::string id, std::string what, double value, std::string unit,
           bool at_most, double bound) {
    bench_goal g;
    g.id = std::move(id);
    g.what = std::move(what);
    g.allocator = r.allocator;
    g.device = r.device;
    g.param = r.param();
    g.unit = std::move(unit);
    g.at_most = at_most;
    g.bound = bound;
    if (!r.error.empty()) {
      g.met = false;
      g.note = "error: " + r.error;
    } else {
      g.value = value;
      g.met = at_most ? value <= bound : value >= bound;
    }
    out_.push_back(std::move(g));
  }
  void unmeasured(const bench_result& r, std::string id, std::string what, std::string unit, bool at_most,
                  double bound, std::string why) {
    add(r, std::move(id), std::move(what), 0, std::move(unit), at_most, bound);
    out_.back().met.reset();
    out_.back().note = std::move(why);
  }

 private:
  std::vector<bench_goal>& out_;
};

}  // namespace

std::vector<bench_goal> bench_goals(const std::vector<bench_result>& results) {
  std::vector<bench_goal> out;
  const auto ours_it = std::find_if(results.begin(), results.end(), [](const bench_result& r) { return r.is_gpumem; });
  if (ours_it == results.end()) return out;
  const std::string ours = ours_it->allocator;
  auto find = [&](const std::string& allocator, const std::string& pattern, const std::string& param) {
    const auto it = std::find_if(results.begin(), results.end(), [&](const bench_result& r) {
      return r.allocator == allocator && r.pattern == pattern && r.param() == param;
    });
    return it == results.end() ? nullptr : &*it;
  };
  goal_list goals(out);

  for (const bench_result& cold : results) {
    if (cold.allocator != ours || cold.pattern != "replay") continue;
    const bench_result* warm = find(ours, "replay-warm", cold.trace);
    const std::string& t = cold.trace;
    if (warm) {
      goals.add(*warm, "reserve", t + ": peak reserved / peak live", warm->reserve_over_live, "x", true,
                reserve_bound);
      if (cold.peak_granules > 0)
        goals.add(cold, "first_pass_granules", t + ": first pass, granules mapped / peak's granules",
                  double(cold.driver_maps) / double(cold.peak_granules), "x", true, first_pass_granules_bound);
      if (warm->peak_granules > 0)
        goals.add(*warm, "warm_granules", t + ": granules mapped + unmapped per warm pass (most)",
                  100.0 * double(warm->driver_granules) / double(warm->peak_granules), "% of peak's", true,
                  warm_granules_pct_bound);
      goals.add(*warm, "warm_ns", t + ": warm ns/op", warm->value, "ns/op", true, warm_ns_bound);
    }
    const std::string what = t + ": first-pass ns/op / cudaMallocAsync's";
    if (const bench_result* async = find(async_peer, "replay", t); async && async->error.empty() && async->value > 0)
      goals.add(cold, "first_pass_vs_async", what, cold.value / async->value, "x", true, vs_async_bound);
    else
      goals.unmeasured(cold, "first_pass_vs_async", what, "x", true, vs_async_bound,
                       async                       ? "cudaMallocAsync failed"
                       : cold.device == "simulated" ? "no cudaMallocAsync on the simulated device"
                                                    : "cudaMallocAsync left out of this run");
  }
  for (const bench_result& r : results)
    if (r.allocator == ours && r.pattern == "pair")
      goals.add(r, "pair_ns", "pair " + r.param() + ": ns per alloc+free", r.value, "ns", true, pair_ns_bound);
  if (const bench_result* churn = find(ours, "churn", "")) {
    goals.add(*churn, "churn_ns", "churn: ns/op", churn->value, "ns/op", true, churn_ns_bound);
    if (churn->reserve_over_live > 0 || !churn->error.empty())
      goals.add(*churn, "churn_reserve", "churn: peak reserved / peak live", churn->reserve_over_live, "x", true,
                churn_reserve_bound);
  }
  const bench_result* one = find(ours, "threads", "1 thread");
  if (const bench_result* many = find(ours, "threads", "16 threads")) {
    goals.add(*many, "threads_mops", "16 threads: Mops/s", many->value, "Mops/s", false, threads_mops_bound);
    if (one) {
      bench_result both = *many;
      if (both.error.empty()) both.error = one->error;
      goals.add(both, "threads_scaling", "16 threads / 1 thread", one->value > 0 ? many->value / one->value : 0, "x",
                false, threads_scaling_bound);
    }
  }
  return out;
}

void print_goals(const std::vector<bench_goal>& goals) {
  if (goals.empty()) return;
  std::size_t met = 0, measured = 0, width = 6;
  for (const auto& g : goals) {
    width = std::max(width, g.what.size());
    if (g.met) ++measured, met += *g.met;
  }
  fmt::print("\ngoals of the default ({}, {}): {} of {} met{}\n", goals.front().allocator, goals.front().device, met,
             measured,
             measured < goals.size() ? fmt::format(", {} not measured", goals.size() - measured) : std::string());
  fmt::print("  {:<{}} {:>12} {:>12}  {:<12} {}\n", "figure", width, "value", "goal", "unit", "");
  for (const auto& g : goals) {
    const std::string value = g.met && g.note.empty() ? fmt::format("{:.4g}", g.value) : "-";
    const std::string bound = fmt::format("{} {:g}", g.at_most ? "<=" : ">=", g.bound);
    const std::string verdict = !g.met ? "not measured" : *g.met ? "met" : "NOT MET";
    fmt::print("  {:<{}} {:>12} {:>12}  {:<12} {}{}\n", g.what, width, value, bound, g.unit, verdict,
               g.note.empty() ? "" : " (" + g.note + ")");
  }
}

std::string to_json_line(const bench_goal& g) {
  nlohmann::ordered_json j;
  j["pattern"] = "goal";
  j["goal"] = g.id;
  j["what"] = g.what;
  j["allocator"] = g.allocator;
  j["device"] = g.device;
  if (!g.param.empty()) j["param"] = g.param;
  if (g.met && g.note.empty()) j["value"] = six_digits(g.value);
  j["unit"] = g.unit;
  j["compare"] = g.at_most ? "<=" : ">=";
  j["bound"] = g.bound;
  if (g.met) j["met"] = *g.met;
  else j["met"] = nullptr;
  if (!g.note.empty()) j["note"] = g.note;
  return j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

}  // namespace gpumem::tools
