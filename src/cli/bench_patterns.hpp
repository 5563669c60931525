#pragma once
// The four allocation patterns of `gpumem bench` (issue "Speed"), run against any bench_allocator
// and timed on the host:
//   pair     one alloc + free, warm, at a fixed size: ns per pair.
//   churn    1000 live blocks, sizes log-uniform 256 B - 64 MiB; each step frees a random live
//            block and allocates a new one: ns per op (an op is one alloc or one free).
//   threads  N threads, each on its own stream with 200 live blocks of 256 B - 1 MiB, random
//            free + alloc steps for a fixed wall time, started together at a barrier: aggregate
//            Mops/s over all threads.
//   replay   a recorded trace through the loop gpumem::replay times with (replay_loop.hpp), its
//            plan (dense slots and streams) made and its streams created before the clock starts,
//            what a pass leaves live freed after it stops: ns/op.
// Random choices come from a fixed seed and are drawn before timing. Each figure is the median of
// `reps` timed runs.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "gpumem/trace.hpp"
#include "bench_allocators.hpp"

namespace gpumem::tools {

struct bench_config {
  int reps = 5;
  std::vector<std::size_t> pair_sizes{512, 64u << 10, 1u << 20, 16u << 20, 256u << 20};
  double pair_run_ms = 20;          // each timed run of `pair` lasts about this long
  std::size_t churn_live_blocks = 1000;
  std::size_t churn_min_bytes = 256;
  std::size_t churn_max_bytes = std::size_t{64} << 20;
  double churn_run_ms = 50;
  std::vector<int> thread_counts{1, 4, 16};
  std::size_t threads_live_blocks = 200;
  std::size_t threads_min_bytes = 256;
  std::size_t threads_max_bytes = std::size_t{1} << 20;
  double threads_run_ms = 100;
  // A replay run slower than this ends the repetitions early (cudaMalloc on the long trace).
  double replay_max_run_s = 5;
  // Between the cold and the warm replay pass, after the cold pass's leftovers are freed:
  // bench_allocator::settle (gpumem's pool::settle), outside the clock.
  bool settle_between_passes = false;
  std::uint64_t seed = 42;
};

struct bench_result {
  std::string pattern;     // pair | churn | threads | replay | replay-warm
  std::string allocator;
  std::string device;      // simulated | host | gpu
  bool is_gpumem = false;
  std::size_t size_bytes = 0;   // pair
  int threads = 0;              // threads
  std::string trace;            // replay: file name
  // The figure: ns per pair (pair), ns per op (churn, replay), Mops/s (threads). Lower is better
  // except for Mops/s.
  double value = 0;
  int reps = 0;                 // timed runs the median is taken over
  std::uint64_t ops = 0;        // ops in one timed run (the last)
  std::string error;            // non-empty: the pattern failed; value is meaningless
  // gpumem's rows of churn, threads and replay: what the speed cost in memory — the pool's peak
  // reserved / peak live (0: not known) and the granules it mapped plus unmapped, over the pattern
  // (threads: over every thread count so far; replay: over that pass).
  double reserve_over_live = 0;
  std::uint64_t granules_moved = 0;
  std::uint64_t driver_granules = 0;  // of those, mapped or unmapped by the driver (kept mappings)
  // gpumem's rows: the pool options that differ from the defaults ("max_reserved_bytes=8589934592,
  // zero_on_free=1"), so a JSON line says which pool it measured; empty: the defaults.
  std::string pool_options;
  // The host's speed just before the pattern ran (host_speed.hpp): ns per simulated 512 B pair;
  // 0: not taken.
  double host_ns = 0;
  // `gpumem bench --rounds N`: a round's own line carries its number (1..N); the merged line
  // carries every round's figure, and `value` is their median (so is host_ns).
  int round = 0;
  std::vector<double> round_values;
  // The key naming `value` in JSON: ns_per_pair, ns_per_op or mops_per_s.
  const char* unit_key() const;
  bool higher_is_better() const { return pattern == "threads"; }
  // What identifies the row across allocators: "512 B", "4 threads", a trace name.
  std::string param() const;
};

std::vector<bench_result> bench_pair(bench_allocator& a, const bench_config& c);
std::vector<bench_result> bench_churn(bench_allocator& a, const bench_config& c);
std::vector<bench_result> bench_threads(bench_allocator& a, const bench_config& c);
// Per trace two rows: `replay`, the first pass on a fresh allocator (every allocator starts
// empty: `fresh` gives one — a new instance, or PyTorch's cache emptied), and `replay-warm`, a
// second pass on the same allocator right after. Medians over reps, each rep a fresh allocator.
std::vector<bench_result> bench_replay(const std::function<bench_allocator&()>& fresh,
                                       const std::vector<trace>& traces, const bench_config& c);

// One JSON object, on one line, without a trailing newline; snake_case keys, units in the names.
std::string to_json_line(const bench_result& r);
// The median of `v` (0 when empty).
double median(std::vector<double> v);
// One row per figure of any round (first-seen order): the median over the rounds that measured it,
// with every round's value in round_values (rows that failed in every round keep their error).
std::vector<bench_result> merge_rounds(const std::vector<std::vector<bench_result>>& rounds);

}  // namespace gpumem::tools
