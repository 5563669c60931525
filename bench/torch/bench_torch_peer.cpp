// bench_torch_peer [pair|churn|threads|replay|all] [--reps N] [--traces DIR_OR_FILE]...
// PyTorch's CUDA caching allocator through its C++ API (c10::cuda::CUDACachingAllocator::
// raw_alloc_with_stream / raw_delete) on the patterns of `gpumem bench`, printing the same JSON
// lines (allocator "torch-caching"). A separate program so gpumem never needs torch: built by
// CMake only with -DGPUMEM_TORCH_DIR=<torch package dir>, or by scripts/device_bench.sh with g++.
// Plain C++ + c10 only (no fmt, CLI11, nlohmann).
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include "tools/bench_patterns.hpp"

namespace {

using gpumem::stream_ref;
namespace alloc = c10::cuda::CUDACachingAllocator;

class torch_allocator final : public gpumem::tools::bench_allocator {
 public:
  torch_allocator() {
    // What torch.cuda's lazy init does for Python users.
    alloc::init(static_cast<int>(c10::cuda::device_count()));
  }
  ~torch_allocator() override {
    c10::cuda::device_synchronize();
    alloc::emptyCache();
  }
  std::string name() const override { return "torch-caching"; }
  std::string device() const override { return "gpu"; }
  void* alloc(std::size_t bytes, stream_ref s) override {
    return alloc::raw_alloc_with_stream(bytes, reinterpret_cast<cudaStream_t>(s));
  }
  void free(void* p, std::size_t, stream_ref) override { alloc::raw_delete(p); }
  // Streams of our own, as the other GPU peers get: c10's stream pool needs libtorch_cuda's device
  // hooks, which this program does not load (getStreamFromPool aborts with "Should never been
  // called" on the H200 machine). The caching allocator takes any cudaStream_t.
  stream_ref create_stream() override {
    cudaStream_t s = nullptr;
    if (cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess)
      throw std::runtime_error("bench_torch_peer: cudaStreamCreateWithFlags failed");
    return reinterpret_cast<stream_ref>(s);
  }
  void destroy_stream(stream_ref s) override {
    if (s) {
      c10::cuda::device_synchronize();
      cudaStreamDestroy(reinterpret_cast<cudaStream_t>(s));
    }
  }
  void synchronize() override { c10::cuda::device_synchronize(); }
};

}  // namespace

int main(int argc, char** argv) {
  using namespace gpumem::tools;
  std::string pattern = "all";
  bench_config cfg;
  std::vector<std::filesystem::path> trace_paths;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--reps" && i + 1 < argc) cfg.reps = std::max(1, std::atoi(argv[++i]));
    else if (a == "--traces" && i + 1 < argc) {
      const std::filesystem::path p = argv[++i];
      if (std::filesystem::is_directory(p)) {
        std::vector<std::filesystem::path> found;
        for (const auto& e : std::filesystem::directory_iterator(p))
          if (e.path().filename().string().ends_with(".csv.gz")) found.push_back(e.path());
        std::sort(found.begin(), found.end());
        trace_paths.insert(trace_paths.end(), found.begin(), found.end());
      } else {
        trace_paths.push_back(p);
      }
    } else if (a == "pair" || a == "churn" || a == "threads" || a == "replay" || a == "all") {
      pattern = a;
    } else {
      std::fprintf(stderr, "usage: %s [pair|churn|threads|replay|all] [--reps N] [--traces PATH]...\n", argv[0]);
      return 2;
    }
  }
  try {
    if (c10::cuda::device_count() == 0) {
      std::fprintf(stderr, "bench_torch_peer: no CUDA device visible to PyTorch\n");
      return 2;
    }
    std::vector<gpumem::trace> traces;
    if (pattern == "all" || pattern == "replay")
      for (const auto& p : trace_paths) traces.push_back(gpumem::read_trace(p));
    torch_allocator a;
    bool failed = false;
    auto emit = [&](const std::vector<bench_result>& v) {
      for (const auto& r : v) {
        std::printf("%s\n", to_json_line(r).c_str());
        failed |= !r.error.empty();
      }
      std::fflush(stdout);
    };
    const bool all = pattern == "all";
    // Every pattern starts from an empty cache, as `gpumem bench` gives every pattern a fresh
    // allocator: what one pattern leaves cached must not help the next.
    auto fresh = [&]() -> torch_allocator& {
      a.synchronize();
      alloc::emptyCache();
      return a;
    };
    if (all || pattern == "pair") emit(bench_pair(fresh(), cfg));
    if (all || pattern == "churn") emit(bench_churn(fresh(), cfg));
    if (all || pattern == "threads") emit(bench_threads(fresh(), cfg));
    if (all || pattern == "replay") emit(bench_replay(fresh, traces, cfg));
    return failed ? 1 : 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_torch_peer: %s\n", e.what());
    return 1;
  }
}
