// Kernels for `gpumem bench-hierarchy`. Each one isolates one level of the memory model; the
// comments say what is counted as a byte, because "bandwidth" of registers or constant memory only
// means something once that is fixed.
#include <cuda_runtime.h>

#include <algorithm>
#include <vector>

#include "cuda_check.hpp"
#include "device_util.hpp"
#include "hierarchy_bench.hpp"

namespace gpumem {

namespace {

constexpr int block_threads = 256;
constexpr int inner_iterations = 1024;
constexpr int shared_words = 4096;     // 16 KiB tile
constexpr int constant_words = 4096;   // 16 KiB of the 64 KiB constant bank
constexpr int local_words = 64;

__constant__ float constant_table[constant_words];

// Global: a grid-stride float4 copy; bytes = read + written.
__global__ void global_copy(const float4* __restrict__ in, float4* __restrict__ out, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    out[i] = in[i];
}

// Shared: each thread reads consecutive words (lane i -> bank i: no conflicts); bytes = 4 per read.
__global__ void shared_reads(float* out, int iterations) {
  __shared__ float tile[shared_words];
  for (int i = threadIdx.x; i < shared_words; i += blockDim.x) tile[i] = float(i);
  __syncthreads();
  float a0 = 0, a1 = 0, a2 = 0, a3 = 0;
  for (int i = 0; i < iterations; ++i) {
    const int base = (threadIdx.x + i * 128) & (shared_words - 1);
    a0 += tile[base];
    a1 += tile[(base + 32) & (shared_words - 1)];
    a2 += tile[(base + 64) & (shared_words - 1)];
    a3 += tile[(base + 96) & (shared_words - 1)];
  }
  out[blockIdx.x * blockDim.x + threadIdx.x] = a0 + a1 + a2 + a3;
}

// Registers: independent FMA chains, no memory. Counted as 3 operands x 4 B read per FMA — the
// operand bandwidth the register file delivers.
__global__ void register_fma(float* out, int iterations, float x) {
  float a0 = x, a1 = x + 1, a2 = x + 2, a3 = x + 3, a4 = x + 4, a5 = x + 5, a6 = x + 6, a7 = x + 7;
  for (int i = 0; i < iterations; ++i) {
    a0 = fmaf(a0, 0.999f, 0.001f); a1 = fmaf(a1, 0.999f, 0.001f);
    a2 = fmaf(a2, 0.999f, 0.001f); a3 = fmaf(a3, 0.999f, 0.001f);
    a4 = fmaf(a4, 0.999f, 0.001f); a5 = fmaf(a5, 0.999f, 0.001f);
    a6 = fmaf(a6, 0.999f, 0.001f); a7 = fmaf(a7, 0.999f, 0.001f);
  }
  out[blockIdx.x * blockDim.x + threadIdx.x] = a0 + a1 + a2 + a3 + a4 + a5 + a6 + a7;
}

// Local: an array indexed by a value the compiler cannot know lives in local memory (the
// thread's stack in global memory, cached in L1). Bytes = 4 read + 4 written per iteration.
__global__ void local_spill(float* out, int iterations, int seed) {
  float scratch[local_words];
  for (int i = 0; i < local_words; ++i) scratch[i] = float(i + seed);
  unsigned idx = threadIdx.x * 7u + unsigned(seed);
  float acc = 0;
  for (int i = 0; i < iterations; ++i) {
    idx = (idx * 1103515245u + 12345u);
    const unsigned k = (idx >> 16) & (local_words - 1);
    acc += scratch[k];
    scratch[(k + 1) & (local_words - 1)] = acc;
  }
  out[blockIdx.x * blockDim.x + threadIdx.x] = acc;
}

// Constant: broadcast = every lane of a warp reads the same word (one transaction); divergent =
// each lane reads a different word (the constant cache serialises them). Bytes = 4 per lane-read.
__global__ void constant_reads(float* out, int iterations, int divergent) {
  float acc = 0;
  const int lane = divergent ? int(threadIdx.x & 31) * 33 : 0;
  for (int i = 0; i < iterations; ++i) acc += constant_table[(lane + i * 4) & (constant_words - 1)];
  out[blockIdx.x * blockDim.x + threadIdx.x] = acc;
}

// Latency: one thread follows a chain of dependent loads.
__global__ void chase_global(const unsigned* next, unsigned hops, unsigned* out) {
  unsigned i = 0;
  for (unsigned h = 0; h < hops; ++h) i = next[i];
  *out = i;
}

__global__ void chase_shared(const unsigned* next_init, unsigned hops, unsigned* out) {
  __shared__ unsigned next[shared_words];
  for (int i = threadIdx.x; i < shared_words; i += blockDim.x) next[i] = next_init[i];
  __syncthreads();
  if (threadIdx.x != 0) return;
  unsigned i = 0;
  for (unsigned h = 0; h < hops; ++h) i = next[i];
  *out = i;
}

template <class Launch>
double median_ms(int reps, Launch launch) {
  cudaEvent_t start, stop;
  GPUMEM_CUDA_CHECK(cudaEventCreate(&start));
  GPUMEM_CUDA_CHECK(cudaEventCreate(&stop));
  launch();  // warm-up: first launch pays module loading
  GPUMEM_CUDA_CHECK(cudaGetLastError());
  std::vector<double> times;
  for (int r = 0; r < reps; ++r) {
    GPUMEM_CUDA_CHECK(cudaEventRecord(start));
    launch();
    GPUMEM_CUDA_CHECK(cudaEventRecord(stop));
    GPUMEM_CUDA_CHECK(cudaEventSynchronize(stop));
    GPUMEM_CUDA_CHECK(cudaGetLastError());
    float ms = 0;
    GPUMEM_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    times.push_back(ms);
  }
  (void)cudaEventDestroy(start);
  (void)cudaEventDestroy(stop);
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

// A device buffer freed on scope exit.
struct device_buffer {
  void* p = nullptr;
  explicit device_buffer(size_t bytes) { GPUMEM_CUDA_CHECK(cudaMalloc(&p, bytes)); }
  ~device_buffer() { (void)cudaFree(p); }
  template <class T> T* as() const { return static_cast<T*>(p); }
};

// A permutation cycle whose consecutive hops are `stride` words apart (mod n): far apart in
// memory so every hop misses the caches that a short stride would hit.
std::vector<unsigned> chain(unsigned n, unsigned stride) {
  std::vector<unsigned> next(n);
  for (unsigned i = 0; i < n; ++i) next[i] = (i + stride) % n;
  return next;
}

}  // namespace

hierarchy_result measure_hierarchy(const hierarchy_options& opts) {
  cuda_detail::device_guard g(opts.device);
  const int reps = std::max(1, opts.reps);
  hierarchy_result r;
  cudaDeviceProp prop{};
  GPUMEM_CUDA_CHECK(cudaGetDeviceProperties(&prop, opts.device));
  r.device_name = prop.name;
  const int sms = prop.multiProcessorCount;
  const int blocks = sms * 8;
  const double threads = double(blocks) * block_threads;
  device_buffer out(size_t(blocks) * block_threads * sizeof(float));

  // Global: 2 x 512 MiB, far beyond L2.
  const size_t copy_bytes = size_t(512) << 20;
  device_buffer a(copy_bytes), b(copy_bytes);
  GPUMEM_CUDA_CHECK(cudaMemset(a.p, 1, copy_bytes));
  const size_t n4 = copy_bytes / sizeof(float4);
  const double global_ms = median_ms(reps, [&] {
    global_copy<<<sms * 16, block_threads>>>(a.as<float4>(), b.as<float4>(), n4);
  });
  const double global_bw = 2.0 * double(copy_bytes) / (global_ms * 1e-3);
  r.figures.push_back({"global", "float4 copy kernel, 512 MiB read + 512 MiB written", global_bw, 0, global_ms});

  const int it = inner_iterations * 16;
  const double shared_ms = median_ms(reps, [&] { shared_reads<<<blocks, block_threads>>>(out.as<float>(), it); });
  const double shared_bw = threads * it * 4 * 4.0 / (shared_ms * 1e-3);
  r.figures.push_back({"shared", "conflict-free 4 B reads from a 16 KiB tile", shared_bw, 0, shared_ms});

  const double reg_ms = median_ms(reps, [&] { register_fma<<<blocks, block_threads>>>(out.as<float>(), it, 1.0f); });
  const double reg_bw = threads * it * 8 * 12.0 / (reg_ms * 1e-3);
  r.figures.push_back({"registers", "independent FMAs, 3 x 4 B operands each, no memory", reg_bw, 0, reg_ms});

  const double local_ms = median_ms(reps, [&] { local_spill<<<blocks, block_threads>>>(out.as<float>(), it, 3); });
  const double local_bw = threads * it * 8.0 / (local_ms * 1e-3);
  r.figures.push_back({"local", "dynamically indexed per-thread array (stack, L1-cached), 4 B read + 4 B written", local_bw, 0, local_ms});

  std::vector<float> table(constant_words);
  for (int i = 0; i < constant_words; ++i) table[i] = float(i % 17);
  GPUMEM_CUDA_CHECK(cudaMemcpyToSymbol(constant_table, table.data(), sizeof(float) * constant_words));
  const double cb_ms = median_ms(reps, [&] { constant_reads<<<blocks, block_threads>>>(out.as<float>(), it, 0); });
  const double cd_ms = median_ms(reps, [&] { constant_reads<<<blocks, block_threads>>>(out.as<float>(), it, 1); });
  r.figures.push_back({"constant_broadcast", "every lane of a warp reads the same word", threads * it * 4.0 / (cb_ms * 1e-3), 0, cb_ms});
  r.figures.push_back({"constant_divergent", "each lane reads a different word (serialised)", threads * it * 4.0 / (cd_ms * 1e-3), 0, cd_ms});

  // Latency: a dependent chain over 256 MiB (hops 1 MiB + 4 B apart) vs one inside shared memory.
  const unsigned global_words = (256u << 20) / 4;
  const std::vector<unsigned> gchain = chain(global_words, (1u << 18) + 1);
  device_buffer gnext(size_t(global_words) * 4), result(sizeof(unsigned));
  GPUMEM_CUDA_CHECK(cudaMemcpy(gnext.p, gchain.data(), size_t(global_words) * 4, cudaMemcpyHostToDevice));
  const unsigned global_hops = 100000;
  const double gl_ms = median_ms(reps, [&] { chase_global<<<1, 1>>>(gnext.as<unsigned>(), global_hops, result.as<unsigned>()); });
  const std::vector<unsigned> schain = chain(shared_words, 33);
  device_buffer snext(shared_words * 4);
  GPUMEM_CUDA_CHECK(cudaMemcpy(snext.p, schain.data(), shared_words * 4, cudaMemcpyHostToDevice));
  const unsigned shared_hops = 1000000;
  const double sl_ms = median_ms(reps, [&] { chase_shared<<<1, 128>>>(snext.as<unsigned>(), shared_hops, result.as<unsigned>()); });
  const double gl_ns = gl_ms * 1e6 / global_hops;
  const double sl_ns = sl_ms * 1e6 / shared_hops;
  r.figures.push_back({"global_latency", "dependent loads, 1 MiB apart over 256 MiB (one thread)", 0, gl_ns, gl_ms});
  r.figures.push_back({"shared_latency", "dependent loads within a 16 KiB shared tile (one thread)", 0, sl_ns, sl_ms});

  r.shared_over_global_bandwidth = shared_bw / global_bw;
  r.global_over_shared_latency = gl_ns / sl_ns;
  return r;
}

}  // namespace gpumem
