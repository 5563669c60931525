// GPU targets for the replay engine. Peak reserved is what each allocator itself reports: the
// pool's mapped + spare granules, or the cudaMemPool's ReservedMemHigh. A soak's data check runs
// as kernels on the blocks themselves (pattern_verifier.hpp).
#include "replay_targets.hpp"

#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <cstdint>
#include <stdexcept>
#include <unordered_map>

#include "cuda_check.hpp"
#include "pattern_verifier.hpp"
#include "gpumem/cuda/availability.hpp"
#include "gpumem/cuda/gpu_pool.hpp"
#include "gpumem/detail/pool_tuning.hpp"
#include "gpumem/replay.hpp"

namespace gpumem {
namespace {

void require_gpu(const char* what) {
  const auto& g = gpu_available();
  if (!g) throw std::runtime_error(fmt::format("replay on {} needs a GPU: {}", what, g.reason));
}

// Trace streams to real streams: 0 stays the default stream, others get a stream each.
class stream_map {
 public:
  ~stream_map() {
    for (auto& [k, s] : streams_) cudaStreamDestroy(s);
  }
  stream_ref get(std::uint64_t trace_stream) {
    if (trace_stream == 0) return {};
    auto it = streams_.find(trace_stream);
    if (it == streams_.end()) {
      cudaStream_t s;
      GPUMEM_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
      it = streams_.emplace(trace_stream, s).first;
    }
    return stream_ref{it->second};
  }

 private:
  std::unordered_map<std::uint64_t, cudaStream_t> streams_;
};

class gpu_pool_target final : public replay_target {
 public:
  gpu_pool_target(const replay_options& o, gpu_upstream_kind kind)
      : pool_((require_gpu("gpu-pool"), gpu_pool_options{.upstream = kind, .device = -1, .pool = o.pool, .async = {}}),
              o.tuning ? *o.tuning : detail::pool_tuning{}) {}
  ~gpu_pool_target() override { cudaDeviceSynchronize(); }
  void* allocate(std::size_t bytes, stream_ref s) override {
    try {
      return pool_.allocate(bytes, default_alignment, s);
    } catch (const out_of_memory&) {
      return nullptr;
    }
  }
  void deallocate(void* p, std::size_t bytes, stream_ref s) override { pool_.deallocate(p, bytes, default_alignment, s); }
  stream_ref stream_for(std::uint64_t t) override { return streams_.get(t); }
  std::size_t reserved() override { return pool_.stats().reserved_bytes; }
  std::size_t peak_reserved() override { return pool_.stats().peak_reserved_bytes; }
  void settle() override { pool_.settle(); }
  pool_stats stats() override { return pool_.stats(); }
  std::vector<block_info> blocks() override { return pool_.pool().blocks(); }
  std::unique_ptr<replay_verifier> make_verifier() override { return cuda_detail::make_pattern_verifier(); }

 private:
  stream_map streams_;
  gpu_pool pool_;
};

class async_target final : public replay_target {
 public:
  explicit async_target(const replay_options&) {
    require_gpu("cuda-malloc-async");
    int dev = 0;
    GPUMEM_CUDA_CHECK(cudaGetDevice(&dev));
    GPUMEM_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool_, dev));
    std::uint64_t threshold = UINT64_MAX, zero = 0;
    GPUMEM_CUDA_CHECK(cudaMemPoolSetAttribute(pool_, cudaMemPoolAttrReleaseThreshold, &threshold));
    GPUMEM_CUDA_CHECK(cudaDeviceSynchronize());
    GPUMEM_CUDA_CHECK(cudaMemPoolTrimTo(pool_, 0));
    GPUMEM_CUDA_CHECK(cudaMemPoolSetAttribute(pool_, cudaMemPoolAttrReservedMemHigh, &zero));
  }
  ~async_target() override {
    cudaDeviceSynchronize();
    cudaMemPoolTrimTo(pool_, 0);
  }
  void* allocate(std::size_t bytes, stream_ref s) override {
    void* p = nullptr;
    const cudaError_t e = cudaMallocAsync(&p, bytes, s.get());
    if (e == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      return nullptr;
    }
    GPUMEM_CUDA_CHECK(e);
    return p;
  }
  void deallocate(void* p, std::size_t, stream_ref s) override {
    GPUMEM_CUDA_CHECK(cudaFreeAsync(p, s.get()));
  }
  stream_ref stream_for(std::uint64_t t) override { return streams_.get(t); }
  std::size_t reserved() override { return attribute(cudaMemPoolAttrReservedMemCurrent); }
  std::size_t peak_reserved() override { return attribute(cudaMemPoolAttrReservedMemHigh); }
  std::unique_ptr<replay_verifier> make_verifier() override { return cuda_detail::make_pattern_verifier(); }

 private:
  std::size_t attribute(cudaMemPoolAttr a) {
    std::uint64_t v = 0;
    GPUMEM_CUDA_CHECK(cudaMemPoolGetAttribute(pool_, a, &v));
    return v;
  }
  stream_map streams_;
  cudaMemPool_t pool_{};
};

}  // namespace

void register_gpu_replay_targets() {
  register_replay_target("gpu-pool", [](const replay_options& o) {
    return std::make_unique<gpu_pool_target>(o, gpu_upstream_kind::vmm);
  });
  register_replay_target("gpu-pool-segments", [](const replay_options& o) {
    return std::make_unique<gpu_pool_target>(o, gpu_upstream_kind::device);
  });
  register_replay_target("cuda-malloc-async", [](const replay_options& o) { return std::make_unique<async_target>(o); });
}

}  // namespace gpumem
