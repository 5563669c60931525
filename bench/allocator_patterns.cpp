// Issue "Speed" as Google Benchmark programs, CPU only (runs everywhere, CI too): gpumem's pool on
// the simulated device (virtual memory, 1 TiB, events complete at once) against glibc malloc, on
// the patterns `gpumem bench` runs (src/cli/bench_patterns.hpp):
//   pair/<bytes>   one alloc + free, warm                         (time per iteration = per pair)
//   churn          1000 live blocks, 256 B - 64 MiB log-uniform;   (items = alloc + free ops)
//                  free a random one, allocate a new one
//   threads        per thread: its own stream, 200 live blocks of 256 B - 1 MiB, random steps
//                  (items_per_second aggregates all threads)
//   replay/<trace> one pass of each trace in ../shared/traces (or $GPUMEM_TRACES) per iteration
//                  through the loop of gpumem::replay and `gpumem bench` (replay_loop.hpp),
//                  on a fresh pool per run (so the first pass is cold, the rest warm), by default
//                  and growing first; time_per_op, and reserve = peak reserved / peak live over
//                  all the run's passes
// The GPU peers (cudaMalloc, cudaMallocAsync, CUB, PyTorch) are measured by `gpumem bench` on a GPU.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "gpumem/pool.hpp"
#include "gpumem/detail/pool_tuning.hpp"
#include "gpumem/detail/replay_loop.hpp"
#include "gpumem/detail/replay_plan.hpp"
#include "gpumem/sim_device.hpp"
#include "gpumem/trace.hpp"

namespace {

using gpumem::stream_ref;

// One simulated device and pool for the whole program, with a stream per benchmark thread made up
// front (magic-static initialisation is thread-safe).
struct sim_pool {
  static constexpr int max_threads = 16;
  gpumem::sim_device dev;
  gpumem::pool pool;
  std::vector<stream_ref> streams;
  static gpumem::sim_options opts() {
    gpumem::sim_options o;
    o.capacity_bytes = std::size_t{1} << 40;
    o.auto_complete = true;
    return o;
  }
  sim_pool() : dev(opts()), pool(dev.memory(), dev.streams()) {
    for (int i = 0; i < max_threads; ++i) streams.push_back(dev.create_stream());
  }
  static sim_pool& get() {
    static sim_pool p;
    return p;
  }
  void* alloc(std::size_t b, stream_ref s) { return pool.allocate(b, gpumem::default_alignment, s); }
  void free(void* p, std::size_t b, stream_ref s) { pool.deallocate(p, b, gpumem::default_alignment, s); }
};

struct malloc_alloc {
  void* alloc(std::size_t b, stream_ref) { return std::malloc(b); }
  void free(void* p, std::size_t, stream_ref) { std::free(p); }
};

struct use_pool {
  static sim_pool& get() { return sim_pool::get(); }
  static stream_ref stream(int t) { return sim_pool::get().streams[std::size_t(t)]; }
};
struct use_malloc {
  static malloc_alloc& get() {
    static malloc_alloc m;
    return m;
  }
  static stream_ref stream(int) { return {}; }
};

struct block {
  void* p = nullptr;
  std::size_t bytes = 0;
};

std::size_t log_uniform(std::mt19937_64& rng, std::size_t lo, std::size_t hi) {
  std::uniform_real_distribution<double> d(std::log(double(lo)), std::log(double(hi)));
  const auto s = static_cast<std::size_t>(std::exp(d(rng)));
  return s < lo ? lo : s > hi ? hi : s;
}

// Random steps drawn before the timed loop, cycled.
struct plan {
  std::vector<std::uint32_t> index;
  std::vector<std::size_t> size;
  plan(std::size_t live, std::size_t lo, std::size_t hi, std::uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::uniform_int_distribution<std::uint32_t> pick(0, std::uint32_t(live - 1));
    for (int i = 0; i < (1 << 16); ++i) {
      index.push_back(pick(rng));
      size.push_back(log_uniform(rng, lo, hi));
    }
  }
};

template <class Use>
void pair(benchmark::State& state) {
  auto& a = Use::get();
  const auto bytes = static_cast<std::size_t>(state.range(0));
  a.free(a.alloc(bytes, stream_ref{}), bytes, stream_ref{});  // warm
  for (auto _ : state) {
    void* p = a.alloc(bytes, stream_ref{});
    benchmark::DoNotOptimize(p);
    a.free(p, bytes, stream_ref{});
  }
  state.SetItemsProcessed(2 * state.iterations());
}

template <class Use>
void steps(benchmark::State& state, std::size_t live, std::size_t lo, std::size_t hi, stream_ref s,
           std::uint64_t seed) {
  auto& a = Use::get();
  const plan pl(live, lo, hi, seed + 1);
  std::vector<block> blocks(live);
  std::mt19937_64 rng(seed);
  for (auto& b : blocks) {
    b.bytes = log_uniform(rng, lo, hi);
    b.p = a.alloc(b.bytes, s);
  }
  std::size_t pos = 0;
  for (auto _ : state) {
    const std::size_t j = pos++ & 0xffff;
    block& b = blocks[pl.index[j]];
    a.free(b.p, b.bytes, s);
    b.bytes = pl.size[j];
    b.p = a.alloc(b.bytes, s);
    benchmark::DoNotOptimize(b.p);
  }
  state.SetItemsProcessed(2 * state.iterations());
  for (auto& b : blocks) a.free(b.p, b.bytes, s);
}

template <class Use>
void churn(benchmark::State& state) {
  steps<Use>(state, 1000, 256, std::size_t{64} << 20, stream_ref{}, 42);
}

template <class Use>
void threads(benchmark::State& state) {
  const int t = state.thread_index();
  steps<Use>(state, 200, 256, std::size_t{1} << 20, Use::stream(t), 1000 + std::uint64_t(t));
}

void pair_sizes(benchmark::internal::Benchmark* b) {
  for (long s : {512L, 64L << 10, 1L << 20, 16L << 20, 256L << 20}) b->Arg(s);
}

BENCHMARK(pair<use_pool>)->Name("pair/gpumem-sim")->Apply(pair_sizes);
BENCHMARK(pair<use_malloc>)->Name("pair/malloc")->Apply(pair_sizes);
BENCHMARK(churn<use_pool>)->Name("churn/gpumem-sim");
BENCHMARK(churn<use_malloc>)->Name("churn/malloc");
BENCHMARK(threads<use_pool>)->Name("threads/gpumem-sim")->Threads(1)->Threads(4)->Threads(16)->UseRealTime();
BENCHMARK(threads<use_malloc>)->Name("threads/malloc")->Threads(1)->Threads(4)->Threads(16)->UseRealTime();

// --- replay: the shared traces, one pass per iteration ------------------------------------------

// Seconds per op of the plan, printed with its unit (e.g. 74.2ns).
benchmark::Counter per_op(const gpumem::replay_plan& plan) {
  return benchmark::Counter(double(plan.ops.size()),
                            benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}

// One pass of the plan per iteration, through the loop gpumem::replay and `gpumem bench` time with
// (replay_loop.hpp); what the trace leaves live is freed while the clock is paused.
template <class Alloc>
void replay_passes(benchmark::State& state, Alloc& a, const gpumem::replay_plan& plan, std::vector<stream_ref> streams) {
  gpumem::replay_loop<Alloc> loop(a, plan, std::move(streams));
  for (auto _ : state) {
    loop.run();
    state.PauseTiming();
    loop.free_live();
    state.ResumeTiming();
  }
}

void replay_on_pool(benchmark::State& state, const gpumem::replay_plan& plan, bool grow_first) {
  gpumem::sim_device dev(sim_pool::opts());
  gpumem::detail::pool_tuning tuning;
  tuning.grow_before_reclaim = grow_first;
  gpumem::pool pool(dev.memory(), dev.streams(), {}, tuning);
  std::vector<stream_ref> streams{stream_ref{}};
  while (streams.size() < plan.streams.size()) streams.push_back(dev.create_stream());
  struct on_pool {
    gpumem::pool& p;
    void* alloc(std::size_t b, stream_ref s) { return p.allocate(b, gpumem::default_alignment, s); }
    void free(void* q, std::size_t b, stream_ref s) { p.deallocate(q, b, gpumem::default_alignment, s); }
  } a{pool};
  replay_passes(state, a, plan, std::move(streams));
  state.counters["time_per_op"] = per_op(plan);
  state.counters["reserve"] = pool.stats().fragmentation();
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(plan.ops.size()));
  pool.trim();
}

void replay_on_malloc(benchmark::State& state, const gpumem::replay_plan& plan) {
  replay_passes(state, use_malloc::get(), plan, std::vector<stream_ref>(plan.streams.size(), stream_ref{}));
  state.counters["time_per_op"] = per_op(plan);
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(plan.ops.size()));
}

// The traces' folder: $GPUMEM_TRACES, else the shared one beside the checkout.
std::filesystem::path traces_folder() {
  if (const char* env = std::getenv("GPUMEM_TRACES"); env && *env) return env;
  return GPUMEM_SHARED_TRACES;
}

void register_replays() {
  static std::vector<std::unique_ptr<gpumem::replay_plan>> plans;  // alive while the benchmarks run
  std::error_code ec;
  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::directory_iterator(traces_folder(), ec)) {
    const std::string name = e.path().filename().string();
    if (name.ends_with(".csv") || name.ends_with(".csv.gz")) files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  for (const auto& f : files) {
    plans.push_back(std::make_unique<gpumem::replay_plan>(gpumem::make_replay_plan(gpumem::read_trace(f))));
    const gpumem::replay_plan* plan = plans.back().get();
    std::string name = f.filename().string();
    name = name.substr(0, name.find('.'));
    benchmark::RegisterBenchmark(("replay/" + name + "/gpumem-sim").c_str(),
                                 [plan](benchmark::State& st) { replay_on_pool(st, *plan, false); })
        ->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark(("replay/" + name + "/gpumem-sim+grow").c_str(),
                                 [plan](benchmark::State& st) { replay_on_pool(st, *plan, true); })
        ->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark(("replay/" + name + "/malloc").c_str(),
                                 [plan](benchmark::State& st) { replay_on_malloc(st, *plan); })
        ->Unit(benchmark::kMillisecond);
  }
  if (files.empty())
    std::fprintf(stderr, "bench_allocator_patterns: no traces in %s: replay skipped\n", traces_folder().c_str());
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  register_replays();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
