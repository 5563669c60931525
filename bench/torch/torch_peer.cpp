// PyTorch's CUDA caching allocator as a `gpumem bench` peer: a shared library for
// `gpumem bench --peer-lib libgpumem_torch_peer.so`, timed in the same process as gpumem's pool,
// cudaMalloc, cudaMallocAsync and CUB, on the same patterns (src/cli/bench_peer.h). It goes
// through the caching allocator's C++ API, c10::cuda::CUDACachingAllocator::raw_alloc_with_stream /
// raw_delete, as a C++ extension would.
//
// Built only where torch is installed: by CMake with -DGPUMEM_TORCH_DIR=<torch package dir>, or
// by scripts/gpu_check.sh with g++. It links torch's c10 and c10_cuda and nothing of gpumem's:
// only the C interface crosses to the bench, so torch's standard library and CUDA runtime never
// meet gpumem's.
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstdio>
#include <exception>
#include <mutex>
#include <stdexcept>

#include "bench_peer.h"

namespace {

namespace alloc = c10::cuda::CUDACachingAllocator;

// Runs `f`; an exception becomes the message in `err` (nothing may cross the C interface).
template <class F>
bool guarded(char* err, std::size_t err_bytes, F&& f) noexcept {
  try {
    f();
    return true;
  } catch (const std::exception& e) {
    std::snprintf(err, err_bytes, "%s", e.what());
  } catch (...) {
    std::snprintf(err, err_bytes, "an exception that is not a std::exception");
  }
  return false;
}

// The caching allocator is one per process: every open hands out the same token, and open and
// close empty its cache, so each pattern starts from nothing, as the other peers do.
int token;

void empty_cache() {
  c10::cuda::device_synchronize();
  alloc::emptyCache();
}

void* peer_open(char* err, std::size_t err_bytes) {
  const bool ok = guarded(err, err_bytes, [] {
    if (c10::cuda::device_count() == 0) throw std::runtime_error("no CUDA device visible to PyTorch");
    // What torch.cuda's lazy init does for Python users, once.
    static std::once_flag once;
    std::call_once(once, [] { alloc::init(static_cast<int>(c10::cuda::device_count())); });
    empty_cache();
  });
  return ok ? &token : nullptr;
}

void peer_close(void*) {
  char err[256];
  if (!guarded(err, sizeof err, empty_cache))
    std::fprintf(stderr, "torch-caching: emptying the cache failed: %s\n", err);
}

void* peer_alloc(void*, std::size_t bytes, std::uintptr_t stream, char* err, std::size_t err_bytes) {
  void* p = nullptr;
  guarded(err, err_bytes, [&] { p = alloc::raw_alloc_with_stream(bytes, reinterpret_cast<cudaStream_t>(stream)); });
  return p;
}

void peer_free(void*, void* p, std::size_t, std::uintptr_t) {
  char err[256];
  if (!guarded(err, sizeof err, [&] { alloc::raw_delete(p); }))
    std::fprintf(stderr, "torch-caching: raw_delete failed: %s\n", err);
}

// Streams of our own, as the built-in GPU peers get: c10's stream pool needs libtorch_cuda's
// device hooks, which a library that loads only c10_cuda lacks (getStreamFromPool aborts with
// "Should never been called"). The caching allocator takes any cudaStream_t.
std::uintptr_t peer_create_stream(void*, char* err, std::size_t err_bytes) {
  cudaStream_t s = nullptr;
  const cudaError_t e = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  if (e != cudaSuccess) {
    std::snprintf(err, err_bytes, "cudaStreamCreateWithFlags: %s", cudaGetErrorString(e));
    return 0;
  }
  return reinterpret_cast<std::uintptr_t>(s);
}

void peer_synchronize(void*) {
  char err[256];
  if (!guarded(err, sizeof err, [] { c10::cuda::device_synchronize(); }))
    std::fprintf(stderr, "torch-caching: device_synchronize failed: %s\n", err);
}

void peer_destroy_stream(void* self, std::uintptr_t s) {
  peer_synchronize(self);
  cudaStreamDestroy(reinterpret_cast<cudaStream_t>(s));
}

const gpumem_bench_peer peer{GPUMEM_BENCH_PEER_ABI, "torch-caching", "gpu",  peer_open,
                             peer_close,            peer_alloc,      peer_free, peer_create_stream,
                             peer_destroy_stream,   peer_synchronize};

}  // namespace

extern "C" __attribute__((visibility("default"))) const gpumem_bench_peer* gpumem_bench_peer_entry(int abi) {
  return abi == GPUMEM_BENCH_PEER_ABI ? &peer : nullptr;
}
