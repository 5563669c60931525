// Seed pitfall 4, many small objects: N buffers of 64 B - 4 KiB allocated one by one from the pool
// and freed, against one gpumem::pack holding all N, on the simulated device (no hardware; the
// simulator's memory is never touched, so this measures the allocator's own cost).
//
// Counters: items_per_second counts buffers; `reserved_bytes_per_buffer` is what the pool held
// from its upstream at the peak divided by N, showing the rounding a per-buffer allocation pays
// (size class, 256-byte alignment) against the pack's exact layout.
#include <benchmark/benchmark.h>

#include <cstddef>
#include <random>
#include <vector>

#include "gpumem/pack.hpp"
#include "gpumem/pool.hpp"
#include "gpumem/sim_device.hpp"

namespace {

// Sizes drawn once per N with a fixed seed, so both variants serve the same requests.
std::vector<gpumem::pack_request> small_requests(std::size_t n) {
  std::mt19937_64 rng(42);
  std::uniform_int_distribution<std::size_t> size(64, 4096);
  std::vector<gpumem::pack_request> out(n);
  // 256 B: what a separate allocation guarantees (cudaMalloc's alignment), so the pack gives
  // each buffer the same alignment the one-by-one path gives it.
  for (auto& q : out) q = {size(rng), gpumem::default_alignment};
  return out;
}

gpumem::sim_options sim_opts() {
  gpumem::sim_options o;
  o.auto_complete = true;  // a single stream; no pending frees to wait on
  return o;
}

void one_by_one(benchmark::State& state) {
  const auto reqs = small_requests(static_cast<std::size_t>(state.range(0)));
  gpumem::sim_device dev(sim_opts());
  gpumem::pool pool(dev.memory(), dev.streams());
  std::vector<void*> ptrs(reqs.size());
  for (auto _ : state) {
    for (std::size_t i = 0; i < reqs.size(); ++i) {
      ptrs[i] = pool.allocate(reqs[i].bytes, reqs[i].alignment, gpumem::stream_ref{});
    }
    benchmark::DoNotOptimize(ptrs.data());
    for (std::size_t i = 0; i < reqs.size(); ++i) {
      pool.deallocate(ptrs[i], reqs[i].bytes, reqs[i].alignment, gpumem::stream_ref{});
    }
  }
  state.SetItemsProcessed(state.iterations() * state.range(0));
  state.counters["reserved_bytes_per_buffer"] =
      double(pool.stats().peak_reserved_bytes) / double(reqs.size());
}

void one_pack(benchmark::State& state) {
  const auto reqs = small_requests(static_cast<std::size_t>(state.range(0)));
  gpumem::sim_device dev(sim_opts());
  gpumem::pool pool(dev.memory(), dev.streams());
  std::size_t padding = 0;
  for (auto _ : state) {
    gpumem::pack<gpumem::pool> p(pool, reqs, gpumem::stream_ref{});  // plans the layout and allocates once
    benchmark::DoNotOptimize(p.base());
    padding = p.layout().padding_bytes;
  }  // freed once, at the end of each iteration
  state.SetItemsProcessed(state.iterations() * state.range(0));
  state.counters["reserved_bytes_per_buffer"] =
      double(pool.stats().peak_reserved_bytes) / double(reqs.size());
  state.counters["padding_bytes_per_buffer"] = double(padding) / double(reqs.size());
}

}  // namespace

BENCHMARK(one_by_one)->Arg(100)->Arg(1000)->Arg(10000);
BENCHMARK(one_pack)->Arg(100)->Arg(1000)->Arg(10000);
BENCHMARK_MAIN();
