#pragma once
// The allocators `gpumem bench` compares, behind one small interface so each pattern is written
// once. CPU ones (gpumem's pool on the simulated device, glibc malloc) live in bench_allocators.cpp;
// GPU ones (gpumem on the GPU, cudaMalloc, cudaMallocAsync, CUB's CachingDeviceAllocator) in
// src/cli/cuda/bench_gpu_allocators.cpp, built only with the CUDA layer. Peers from shared libraries
// (PyTorch's caching allocator among them) come through bench_peer_plugin.hpp, so nothing here
// needs torch.
#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "gpumem/core.hpp"
#include "gpumem/pool.hpp"

namespace gpumem::tools {

class bench_allocator {
 public:
  virtual ~bench_allocator() = default;
  virtual std::string name() const = 0;
  // "simulated", "host" or "gpu": where the memory lives.
  virtual std::string device() const = 0;
  // Throws on failure (out_of_memory, cuda_error, std::bad_alloc).
  virtual void* alloc(std::size_t bytes, stream_ref s) = 0;
  // `bytes` is what alloc was given; `s` the stream it is freed on: alloc's, but for a trace
  // that frees on another.
  virtual void free(void* p, std::size_t bytes, stream_ref s) = 0;
  // A stream of its own for one thread of the `threads` pattern (a cudaStream_t on the GPU, a
  // simulated stream on the simulator); created before the clock starts.
  virtual stream_ref create_stream() { return {}; }
  virtual void destroy_stream(stream_ref) {}
  // Waits for the device work enqueued so far; called between timed runs, never inside one.
  virtual void synchronize() {}
  // gpumem's own allocator: the tables show its ratio to every other one.
  virtual bool is_gpumem() const { return false; }
  // gpumem's allocators: the pool's figures now (peaks since it was made); nullopt for the peers.
  virtual std::optional<pool_stats> gpumem_stats() const { return std::nullopt; }
  // gpumem's allocators: the upstream's granule (what the driver maps at a time); 0 for the peers.
  virtual std::size_t granule_bytes() const { return 0; }
  // Peers that can tell: the most device memory they have held since they were made (after a
  // synchronize), so a replay row can set their reserve beside gpumem's; nullopt: not known.
  virtual std::optional<std::size_t> peak_reserved_bytes() { return std::nullopt; }
};

// Allocators are made one at a time and destroyed before the next, so their caches never compete
// for the device's memory.
struct bench_allocator_maker {
  std::string name;
  std::function<std::unique_ptr<bench_allocator>()> make;
};

// gpumem::pool on a sim_device (virtual memory, 1 TiB, events complete at once) with the default
// pool options (the product: bench measures no other), and malloc/free.
std::vector<bench_allocator_maker> cpu_bench_allocators();

#if GPUMEM_HAVE_CUDA
// gpumem's gpu_pool (vmm upstream, default pool options), cudaMalloc/cudaFree,
// cudaMallocAsync/cudaFreeAsync on the device's default pool (release threshold UINT64_MAX),
// cub::CachingDeviceAllocator. Needs a GPU.
std::vector<bench_allocator_maker> gpu_bench_allocators();
#endif

}  // namespace gpumem::tools
