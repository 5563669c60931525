// The patterns of `gpumem bench`; see bench_patterns.hpp. Everything random is drawn before the
// clock starts, and nothing but the allocator's calls (and an index into a prepared array) runs
// inside a timed loop.
#include "bench_patterns.hpp"

#include <algorithm>
#include <atomic>
#include <barrier>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <map>
#include <optional>
#include <random>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "gpumem/detail/replay_loop.hpp"
#include "gpumem/detail/replay_plan.hpp"

namespace gpumem::tools {
namespace {

using clock_type = std::chrono::steady_clock;

double elapsed_ns(clock_type::time_point t0) {
  return std::chrono::duration<double, std::nano>(clock_type::now() - t0).count();
}

// Keeps the compiler from proving an alloc/free pair dead.
volatile std::uintptr_t sink;

// gpumem's rows: the pool's peak reserved / peak live and granules moved so far, beside the speed.
void note_pool(bench_result& r, const bench_allocator& a) {
  if (const std::optional<pool_stats> st = a.gpumem_stats()) {
    r.reserve_over_live = st->fragmentation();
    r.granules_moved = st->maps + st->unmaps;
    r.driver_granules = st->driver_maps + st->driver_unmaps;
  }
}

bench_result base(const bench_allocator& a, const char* pattern) {
  bench_result r;
  r.pattern = pattern;
  r.allocator = a.name();
  r.device = a.device();
  r.is_gpumem = a.is_gpumem();
  return r;
}

// Sizes log-uniform in [lo, hi]: as many requests between 256 B and 4 KiB as between 4 MiB and
// 64 MiB, the spread real jobs show.
class log_uniform {
 public:
  log_uniform(std::size_t lo, std::size_t hi)
      : d_(std::log(double(lo)), std::log(double(hi))), lo_(lo), hi_(hi) {}
  std::size_t operator()(std::mt19937_64& rng) {
    const auto s = static_cast<std::size_t>(std::exp(d_(rng)));
    return std::clamp(s, lo_, hi_);
  }

 private:
  std::uniform_real_distribution<double> d_;
  std::size_t lo_, hi_;
};

// A prepared sequence of (which live block, new size) steps, cycled through.
struct step_plan {
  std::vector<std::uint32_t> index;
  std::vector<std::size_t> size;
  std::size_t mask = 0;
};

step_plan make_plan(std::size_t live, std::size_t lo, std::size_t hi, std::uint64_t seed,
                    std::size_t steps_pow2 = 16) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<std::uint32_t> pick(0, static_cast<std::uint32_t>(live - 1));
  log_uniform sz(lo, hi);
  step_plan p;
  const std::size_t n = std::size_t{1} << steps_pow2;
  p.mask = n - 1;
  p.index.resize(n);
  p.size.resize(n);
  for (std::size_t i = 0; i < n; ++i) {
    p.index[i] = pick(rng);
    p.size[i] = sz(rng);
  }
  return p;
}

struct live_block {
  void* p = nullptr;
  std::size_t bytes = 0;
};

// Frees one live block and allocates its replacement. The slot is emptied first, so a throwing
// alloc leaves nothing to free twice.
inline void step(bench_allocator& a, std::vector<live_block>& blocks, const step_plan& plan,
                 std::size_t j, stream_ref s) {
  live_block& b = blocks[plan.index[j]];
  if (b.p) a.free(b.p, b.bytes, s);
  b.p = nullptr;
  const std::size_t bytes = plan.size[j];
  b.p = a.alloc(bytes, s);
  b.bytes = bytes;
}

void fill(bench_allocator& a, std::vector<live_block>& blocks, std::size_t lo, std::size_t hi,
          std::uint64_t seed, stream_ref s) {
  std::mt19937_64 rng(seed);
  log_uniform sz(lo, hi);
  for (auto& b : blocks) {
    b.bytes = sz(rng);
    b.p = a.alloc(b.bytes, s);
  }
}

void drain(bench_allocator& a, std::vector<live_block>& blocks, stream_ref s) noexcept {
  for (auto& b : blocks) {
    if (b.p) {
      try {
        a.free(b.p, b.bytes, s);
      } catch (...) {
      }
    }
    b = {};
  }
}

// Finds a unit count whose run lasts about `target_ms`, then times `reps` runs of it. Returns the
// median ns per unit; `units` receives the count.
template <class Run>
double calibrated_median(bench_allocator& a, Run&& run, double target_ms, int reps,
                         std::uint64_t& units) {
  const double target_ns = target_ms * 1e6;
  std::uint64_t n = 1;
  double ns = 0;
  for (;;) {
    const auto t0 = clock_type::now();
    run(n);
    ns = elapsed_ns(t0);
    a.synchronize();
    // A lone slow first call must not end the search early: at least 16 units unless one
    // probe already lasts the whole target.
    if ((ns >= target_ns / 8 && n >= 16) || ns >= target_ns || n >= (std::uint64_t{1} << 30)) break;
    n *= 2;
  }
  n = std::max<std::uint64_t>(1, static_cast<std::uint64_t>(double(n) * target_ns / std::max(ns, 1.0)));
  std::vector<double> samples;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = clock_type::now();
    run(n);
    samples.push_back(elapsed_ns(t0) / double(n));
    a.synchronize();
  }
  units = n;
  return median(std::move(samples));
}

std::string size_text(std::size_t b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  double v = double(b);
  while (v >= 1024 && u < 4 && std::fmod(v, 1024) == 0) {
    v /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g %s", v, units[u]);
  return buf;
}

// Six significant digits, as the tables print: a figure's noise is far larger than that.
double six_digits(double v) { return std::strtod(fmt::format("{:.6g}", v).c_str(), nullptr); }

}  // namespace

const char* bench_result::unit_key() const {
  if (pattern == "pair") return "ns_per_pair";
  if (pattern == "threads") return "mops_per_s";
  return "ns_per_op";
}

std::string bench_result::param() const {
  if (pattern == "pair") return size_text(size_bytes);
  if (pattern == "threads") return std::to_string(threads) + (threads == 1 ? " thread" : " threads");
  if (pattern == "replay" || pattern == "replay-warm") return trace;
  return "";
}

std::vector<bench_result> bench_pair(bench_allocator& a, const bench_config& c) {
  std::vector<bench_result> out;
  for (const std::size_t size : c.pair_sizes) {
    bench_result r = base(a, "pair");
    r.size_bytes = size;
    try {
      auto run = [&](std::uint64_t n) {
        for (std::uint64_t i = 0; i < n; ++i) {
          void* p = a.alloc(size, stream_ref{});
          sink = reinterpret_cast<std::uintptr_t>(p);
          a.free(p, size, stream_ref{});
        }
      };
      run(8);  // warm: the first pair may go to the upstream
      a.synchronize();
      std::uint64_t n = 0;
      r.value = calibrated_median(a, run, c.pair_run_ms, c.reps, n);
      r.reps = c.reps;
      r.ops = 2 * n;
    } catch (const std::exception& e) {
      r.error = e.what();
    }
    out.push_back(std::move(r));
  }
  return out;
}

std::vector<bench_result> bench_churn(bench_allocator& a, const bench_config& c) {
  bench_result r = base(a, "churn");
  const step_plan plan =
      make_plan(c.churn_live_blocks, c.churn_min_bytes, c.churn_max_bytes, c.seed + 1);
  std::vector<live_block> blocks(c.churn_live_blocks);
  try {
    fill(a, blocks, c.churn_min_bytes, c.churn_max_bytes, c.seed, stream_ref{});
    std::size_t pos = 0;
    auto run = [&](std::uint64_t n) {
      for (std::uint64_t i = 0; i < n; ++i) step(a, blocks, plan, pos++ & plan.mask, stream_ref{});
    };
    run(2 * c.churn_live_blocks);  // warm: the pool reaches its steady state
    a.synchronize();
    std::uint64_t n = 0;
    r.value = calibrated_median(a, run, c.churn_run_ms, c.reps, n) / 2;  // 2 ops per step
    r.reps = c.reps;
    r.ops = 2 * n;
    note_pool(r, a);
  } catch (const std::exception& e) {
    r.error = e.what();
  }
  drain(a, blocks, stream_ref{});
  a.synchronize();
  return {r};
}

std::vector<bench_result> bench_threads(bench_allocator& a, const bench_config& c) {
  std::vector<bench_result> out;
  const int most = c.thread_counts.empty()
                       ? 0
                       : *std::max_element(c.thread_counts.begin(), c.thread_counts.end());
  std::vector<stream_ref> streams;
  std::vector<step_plan> plans;
  try {
    for (int t = 0; t < most; ++t) {
      streams.push_back(a.create_stream());
      plans.push_back(make_plan(c.threads_live_blocks, c.threads_min_bytes, c.threads_max_bytes,
                                c.seed + 1000 + std::uint64_t(t), 14));
    }
  } catch (const std::exception& e) {
    for (const int n : c.thread_counts) {
      bench_result r = base(a, "threads");
      r.threads = n;
      r.error = e.what();
      out.push_back(std::move(r));
    }
    for (stream_ref s : streams) a.destroy_stream(s);
    return out;
  }

  for (const int n : c.thread_counts) {
    bench_result r = base(a, "threads");
    r.threads = n;
    std::vector<double> samples;
    for (int rep = 0; rep < c.reps && r.error.empty(); ++rep) {
      std::barrier start(n + 1), done(n + 1);
      std::atomic<bool> stop{false};
      struct alignas(64) per_thread {
        std::uint64_t ops = 0;
        std::string error;
      };
      std::vector<per_thread> state(static_cast<std::size_t>(n));
      std::vector<std::thread> workers;
      for (int t = 0; t < n; ++t) {
        workers.emplace_back([&, t] {
          per_thread& me = state[std::size_t(t)];
          const stream_ref s = streams[std::size_t(t)];
          const step_plan& plan = plans[std::size_t(t)];
          std::vector<live_block> blocks(c.threads_live_blocks);
          try {
            fill(a, blocks, c.threads_min_bytes, c.threads_max_bytes, c.seed + 2000 + std::uint64_t(t), s);
          } catch (const std::exception& e) {
            me.error = e.what();
          }
          start.arrive_and_wait();
          if (me.error.empty()) {
            try {
              std::size_t pos = 0, steps = 0;
              while (!stop.load(std::memory_order_relaxed)) {
                step(a, blocks, plan, pos++ & plan.mask, s);
                ++steps;
              }
              me.ops = 2 * steps;
            } catch (const std::exception& e) {
              me.error = e.what();
            }
          }
          done.arrive_and_wait();
          drain(a, blocks, s);
        });
      }
      start.arrive_and_wait();
      const auto t0 = clock_type::now();
      std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(c.threads_run_ms));
      stop.store(true, std::memory_order_relaxed);
      done.arrive_and_wait();
      const double ns = elapsed_ns(t0);
      for (auto& w : workers) w.join();
      a.synchronize();
      std::uint64_t ops = 0;
      for (const auto& st : state) {
        ops += st.ops;
        if (!st.error.empty() && r.error.empty()) r.error = st.error;
      }
      samples.push_back(double(ops) / ns * 1e3);  // ops per ns * 1e9 / 1e6
      r.ops = ops;
    }
    r.value = median(samples);
    r.reps = static_cast<int>(samples.size());
    note_pool(r, a);
    out.push_back(std::move(r));
  }
  a.synchronize();
  for (stream_ref s : streams) a.destroy_stream(s);
  return out;
}

namespace {

// The passes of a trace on one allocator, ns per op: the first on a fresh allocator (growing from
// nothing: driver calls included) and the warm ones right after it (the memory already reserved:
// what a job's later steps pay).
struct replay_pass {
  double ns_per_op = 0;
  // gpumem's pools: peak reserved / peak live and peak reserved in granules at the pass's end;
  // granules moved in the pass, and those the driver mapped / mapped or unmapped.
  double reserve = 0;
  std::uint64_t peak_granules = 0;
  std::uint64_t moved = 0;
  std::uint64_t driver_maps = 0;
  std::uint64_t driver = 0;
};
struct replay_run {
  std::vector<replay_pass> passes;  // the first, then the warm ones
  std::uint64_t ops = 0;            // in one pass
};

// Every pass of a plan on one allocator, through the shared replay loop (replay_loop.hpp) that
// gpumem::replay times its targets with: streams made before the clock starts, what a pass leaves
// live freed after it stops.
replay_run replay_passes(bench_allocator& a, const replay_plan& plan, int passes) {
  std::vector<stream_ref> streams{stream_ref{}};  // the plan's stream 0 is the default stream
  struct stream_guard {
    bench_allocator& a;
    const std::vector<stream_ref>& streams;
    ~stream_guard() {
      a.synchronize();
      for (const stream_ref s : streams)
        if (s != stream_ref{}) a.destroy_stream(s);
    }
  } guard{a, streams};
  while (streams.size() < plan.streams.size()) streams.push_back(a.create_stream());
  replay_loop<bench_allocator> loop(a, plan, streams);
  replay_run out;
  out.ops = plan.ops.size();
  const std::size_t granule = a.granule_bytes();
  // The most bytes the trace holds at once (every pass starts from nothing): the peers' peak live.
  std::uint64_t plan_peak_live = 0, live = 0;
  for (const replay_plan::op& o : plan.ops) {
    live = o.alloc ? live + o.size : live - std::min(live, o.size);
    plan_peak_live = std::max(plan_peak_live, live);
  }
  pool_stats before;  // gpumem's pool: its counters before this pass
  for (int i = 0; i < passes; ++i) {
    replay_pass& pass = out.passes.emplace_back();
    std::exception_ptr failure;
    const auto t0 = clock_type::now();
    try {
      loop.run();
    } catch (...) {
      failure = std::current_exception();
    }
    const double ns = elapsed_ns(t0);
    // gpumem's pool: its figures at the pass's end, before what is left live goes. A peer that
    // knows its peak reserved: that over the plan's peak live.
    if (!a.is_gpumem()) {
      a.synchronize();
      if (const std::optional<std::size_t> peak = a.peak_reserved_bytes(); peak && *peak > 0 && plan_peak_live > 0)
        pass.reserve = double(*peak) / double(plan_peak_live);
    }
    if (const std::optional<pool_stats> st = a.gpumem_stats()) {
      pass.reserve = st->fragmentation();
      pass.peak_granules = granule ? (st->peak_reserved_bytes + granule - 1) / granule : 0;
      pass.moved = st->maps + st->unmaps - before.maps - before.unmaps;
      pass.driver_maps = st->driver_maps - before.driver_maps;
      pass.driver = pass.driver_maps + st->driver_unmaps - before.driver_unmaps;
      before = *st;
    }
    loop.free_live();
    a.synchronize();
    if (failure) std::rethrow_exception(failure);
    pass.ns_per_op = out.ops ? ns / double(out.ops) : 0;
  }
  return out;
}

std::string file_name(const std::string& path) {
  const auto slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

}  // namespace

std::vector<bench_result> bench_replay(const std::function<bench_allocator&()>& fresh,
                                       const std::vector<trace>& traces, const bench_config& c) {
  std::vector<bench_result> out;
  const int passes = std::max(2, c.replay_passes);
  for (const trace& t : traces) {
    const replay_plan plan = make_replay_plan(t);
    bench_allocator& first = fresh();
    bench_result cold = base(first, "replay"), warm = base(first, "replay-warm");
    cold.trace = warm.trace = file_name(t.name);
    warm.passes = passes - 1;
    try {
      std::vector<double> colds, warms;
      for (int rep = 0; rep < c.reps; ++rep) {
        bench_allocator& a = rep ? fresh() : first;
        const replay_run run = replay_passes(a, plan, passes);
        double seconds = 0;
        for (const replay_pass& p : run.passes) seconds += p.ns_per_op * double(run.ops) * 1e-9;
        colds.push_back(run.passes.front().ns_per_op);
        for (std::size_t i = 1; i < run.passes.size(); ++i) warms.push_back(run.passes[i].ns_per_op);
        cold.ops = warm.ops = run.ops;
        // The same every rep (placement depends on the trace alone): the last one's. The warm row
        // is the warm pass that moved the most granules, at the pool's peaks after the last.
        cold.reserve_over_live = run.passes.front().reserve;
        warm.reserve_over_live = run.passes.back().reserve;
        if (a.is_gpumem()) {
          const replay_pass& p0 = run.passes.front();
          cold.granules_moved = p0.moved;
          cold.driver_granules = p0.driver;
          cold.driver_maps = p0.driver_maps;
          cold.peak_granules = p0.peak_granules;
          warm.peak_granules = run.passes.back().peak_granules;
          warm.granules_moved = warm.driver_granules = 0;
          for (std::size_t i = 1; i < run.passes.size(); ++i) {
            warm.granules_moved = std::max(warm.granules_moved, run.passes[i].moved);
            warm.driver_granules = std::max(warm.driver_granules, run.passes[i].driver);
          }
        }
        if (seconds > c.replay_max_run_s) break;
      }
      cold.reps = warm.reps = static_cast<int>(colds.size());
      cold.value = median(std::move(colds));
      warm.value = median(std::move(warms));
    } catch (const std::exception& e) {
      cold.error = warm.error = e.what();
    }
    out.push_back(std::move(cold));
    out.push_back(std::move(warm));
  }
  return out;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : (v[m - 1] + v[m]) / 2;
}

std::vector<bench_result> merge_rounds(const std::vector<std::vector<bench_result>>& rounds) {
  // One row per figure any round has, in first-seen order (an allocator that threw in round 1 may
  // have measured in round 2); the memory figures are those of the last round that measured it.
  std::vector<bench_result> out;
  std::vector<std::vector<double>> values, hosts;  // by row of `out`
  std::map<std::string, std::size_t> row_of;        // pattern, allocator, param -> row
  for (const auto& round : rounds)
    for (const bench_result& r : round) {
      const auto [it, fresh] = row_of.try_emplace(r.pattern + '\n' + r.allocator + '\n' + r.param(), out.size());
      if (fresh) {
        out.push_back(r);
        values.emplace_back();
        hosts.emplace_back();
      }
      if (!r.error.empty()) continue;
      const std::size_t i = it->second;
      out[i] = r;
      values[i].push_back(r.value);
      if (r.host_ns > 0) hosts[i].push_back(r.host_ns);
    }
  for (std::size_t i = 0; i < out.size(); ++i) {
    out[i].round = 0;
    if (values[i].empty()) continue;  // failed in every round: keeps its error
    out[i].value = median(values[i]);
    out[i].host_ns = median(hosts[i]);
    out[i].round_values = std::move(values[i]);
  }
  return out;
}

std::string to_json_line(const bench_result& r) {
  // Keys in a fixed order (ordered_json keeps insertion order), so lines read alike and diff well.
  nlohmann::ordered_json j;
  j["pattern"] = r.pattern;
  j["allocator"] = r.allocator;
  j["device"] = r.device;
  if (r.pattern == "pair") j["size_bytes"] = r.size_bytes;
  if (r.pattern == "threads") j["threads"] = r.threads;
  if (r.pattern == "replay" || r.pattern == "replay-warm") j["trace"] = r.trace;
  if (r.error.empty()) j[r.unit_key()] = six_digits(r.value);
  else j["error"] = r.error;
  if (r.reserve_over_live > 0) j["peak_reserved_over_live"] = six_digits(r.reserve_over_live);
  if (r.reserve_over_live > 0 && r.is_gpumem) {
    j["granules_moved"] = r.granules_moved;
    j["driver_granules"] = r.driver_granules;
  }
  if (r.peak_granules > 0) {
    j["peak_granules"] = r.peak_granules;
    if (r.pattern == "replay") j["driver_maps"] = r.driver_maps;
  }
  if (r.passes > 0) j["passes"] = r.passes;
  if (r.host_ns > 0) j["host_ns_per_sim_pair"] = six_digits(r.host_ns);
  j["reps"] = r.reps;
  j["ops_per_run"] = r.ops;
  if (r.round > 0) j["round"] = r.round;
  if (!r.round_values.empty()) {
    j["rounds"] = r.round_values.size();
    auto& v = j["round_values"] = nlohmann::ordered_json::array();
    for (double x : r.round_values) v.push_back(six_digits(x));
  }
  // A trace name or an error text that is not UTF-8 is written with U+FFFD, not refused.
  return j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

}  // namespace gpumem::tools
