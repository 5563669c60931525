// CUDA graph capture through gpu_pool's graph pools: a small transformer-like layer (a banded
// matmul, an expansion, a row softmax with its statistics, a reduction, a residual add) that
// allocates and frees its temporaries inside the capture, replayed many times (10,000 by default;
// GPUMEM_GRAPH_REPLAYS sets it, e.g. lower under compute-sanitizer) while another stream allocates,
// fills and frees pool memory between replays. Every replay's output must equal the eager run's,
// bit for bit, and the graph pool must hold at most 1.05x the capture's peak.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>

#include "gpu_test_support.hpp"
#include "gpumem/cuda/gpu_pool.hpp"
#include "gpumem/cuda/upstreams.hpp"

namespace {

using gpumem::test::stream_holder;

constexpr int T = 2048, H = 1024, F = 4;  // tokens, hidden, expansion
constexpr std::size_t TH = std::size_t{T} * H;

__device__ float hashf(std::uint64_t i, std::uint64_t seed) {
  std::uint64_t z = i * 0x9E3779B97F4A7C15ull + seed;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z ^= z >> 31;
  return static_cast<float>(z % 2001) / 1000.0f - 1.0f;
}

__global__ void init(float* p, std::size_t n, std::uint64_t seed) {
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < n; i += std::size_t{gridDim.x} * blockDim.x)
    p[i] = hashf(i, seed);
}

// h = x W for a banded W of 8 taps (the matmul of the layer, cheap enough for many replays).
__global__ void mix(const float* x, const float* w, float* h) {
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < TH; i += std::size_t{gridDim.x} * blockDim.x) {
    const std::size_t t = i / H, j = i % H;
    float acc = 0;
    for (int k = 0; k < 8; ++k) acc += x[t * H + (j + k) % H] * w[k];
    h[i] = acc;
  }
}

// s[t][j] for j < F*H: the feed-forward expansion.
__global__ void expand(const float* h, const float* w, float* s) {
  const std::size_t n = TH * F;
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < n; i += std::size_t{gridDim.x} * blockDim.x) {
    const std::size_t t = i / (std::size_t{F} * H), j = i % (std::size_t{F} * H);
    s[i] = h[t * H + j % H] * w[8 + j / H] + 0.001f * static_cast<float>(j % 7);
  }
}

// stats[t] = (max, sum of exp(s - max)) of row t: one block of 256 threads per row, a fixed order.
__global__ void row_stats(const float* s, float* stats) {
  __shared__ float red[256];
  const std::size_t row = blockIdx.x, n = std::size_t{F} * H;
  float m = -1e30f;
  for (std::size_t j = threadIdx.x; j < n; j += blockDim.x) m = fmaxf(m, s[row * n + j]);
  red[threadIdx.x] = m;
  __syncthreads();
  for (unsigned k = blockDim.x / 2; k > 0; k /= 2) {
    if (threadIdx.x < k) red[threadIdx.x] = fmaxf(red[threadIdx.x], red[threadIdx.x + k]);
    __syncthreads();
  }
  m = red[0];
  __syncthreads();
  float sum = 0;
  for (std::size_t j = threadIdx.x; j < n; j += blockDim.x) sum += expf(s[row * n + j] - m);
  red[threadIdx.x] = sum;
  __syncthreads();
  for (unsigned k = blockDim.x / 2; k > 0; k /= 2) {
    if (threadIdx.x < k) red[threadIdx.x] += red[threadIdx.x + k];
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    stats[2 * row] = m;
    stats[2 * row + 1] = red[0];
  }
}

__global__ void softmax(const float* s, const float* stats, float* p) {
  const std::size_t n = TH * F, row_len = std::size_t{F} * H;
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < n; i += std::size_t{gridDim.x} * blockDim.x) {
    const std::size_t t = i / row_len;
    p[i] = expf(s[i] - stats[2 * t]) / stats[2 * t + 1];
  }
}

// a[t][j] = h[t][j] * (sum over the F expansions of p): the contraction back to H.
__global__ void contract(const float* p, const float* h, float* a) {
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < TH; i += std::size_t{gridDim.x} * blockDim.x) {
    const std::size_t t = i / H, j = i % H;
    float acc = 0;
    for (int k = 0; k < F; ++k) acc += p[t * F * H + k * std::size_t{H} + j];
    a[i] = h[i] * acc * static_cast<float>(F * H);
  }
}

__global__ void add(const float* x, const float* a, float* out) {
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < TH; i += std::size_t{gridDim.x} * blockDim.x)
    out[i] = x[i] + a[i];
}

__global__ void compare(const float* a, const float* b, std::size_t n, unsigned long long* bad) {
  unsigned long long mine = 0;
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < n; i += std::size_t{gridDim.x} * blockDim.x)
    mine += __float_as_uint(a[i]) != __float_as_uint(b[i]);
  if (mine) atomicAdd(bad, mine);
}

constexpr int grid = 1024, block = 256;

// The layer: temporaries from the pool on `st`, freed as soon as the layer is done with them.
// Peak live: h + s + stats + p.
void layer(gpumem::gpu_pool& pool, const float* x, const float* w, float* out, cudaStream_t st) {
  auto alloc = [&](std::size_t n) { return static_cast<float*>(pool.allocate(n * sizeof(float), st)); };
  auto release = [&](float* p, std::size_t n) { pool.deallocate(p, n * sizeof(float), st); };
  float* h = alloc(TH);
  mix<<<grid, block, 0, st>>>(x, w, h);
  float* s = alloc(TH * F);
  expand<<<grid, block, 0, st>>>(h, w, s);
  float* stats = alloc(2 * std::size_t{T});
  row_stats<<<T, 256, 0, st>>>(s, stats);
  float* p = alloc(TH * F);
  softmax<<<grid, block, 0, st>>>(s, stats, p);
  release(s, TH * F);
  release(stats, 2 * std::size_t{T});
  float* a = alloc(TH);
  contract<<<grid, block, 0, st>>>(p, h, a);
  release(p, TH * F);
  release(h, TH);
  add<<<grid, block, 0, st>>>(x, a, out);
  release(a, TH);
}
constexpr std::size_t layer_peak_bytes = (TH + TH * F + 2 * std::size_t{T} + TH * F) * sizeof(float);

int replays() {
  if (const char* e = std::getenv("GPUMEM_GRAPH_REPLAYS")) return std::max(1, std::atoi(e));
  return 10000;
}

class GraphCapture : public ::testing::TestWithParam<cudaStreamCaptureMode> {};

TEST_P(GraphCapture, ReplaysMatchTheEagerLayerAndThePoolHoldsThePeak) {
  GPUMEM_REQUIRE_GPU();
  gpumem::gpu_pool pool;
  stream_holder cs, side;
  auto* x = static_cast<float*>(pool.allocate(TH * sizeof(float), cs.s));
  auto* w = static_cast<float*>(pool.allocate(64 * sizeof(float), cs.s));
  auto* eager = static_cast<float*>(pool.allocate(TH * sizeof(float), cs.s));
  auto* replayed = static_cast<float*>(pool.allocate(TH * sizeof(float), cs.s));
  init<<<grid, block, 0, cs.s>>>(x, TH, 1);
  init<<<1, 64, 0, cs.s>>>(w, 64, 2);
  layer(pool, x, w, eager, cs.s);

  const gpumem::graph_pool_id g = pool.create_graph_pool();
  pool.begin_capture(cs.s, g);
  GPUMEM_EXPECT_CUDA(cudaStreamBeginCapture(cs.s, GetParam()));
  layer(pool, x, w, replayed, cs.s);
  cudaGraph_t graph = nullptr;
  GPUMEM_EXPECT_CUDA(cudaStreamEndCapture(cs.s, &graph));
  pool.end_capture(cs.s);
  cudaGraphExec_t exec = nullptr;
  GPUMEM_EXPECT_CUDA(cudaGraphInstantiate(&exec, graph, 0));

  const gpumem::graph_pool_stats st = pool.graph_stats(g);
  EXPECT_EQ(st.peak_live_bytes, layer_peak_bytes);
  EXPECT_EQ(st.live_bytes, 0u) << "every temporary was freed inside the capture";
  const double ratio = static_cast<double>(st.reserved_bytes) / static_cast<double>(st.peak_live_bytes);
  std::printf("graph pool: reserved %zu B for a capture peak of %zu B: %.4fx (%zu mappings)\n", st.reserved_bytes,
              st.peak_live_bytes, ratio, st.mappings);
  EXPECT_LE(ratio, 1.05);

  unsigned long long* bad = nullptr;
  GPUMEM_EXPECT_CUDA(cudaMalloc(&bad, sizeof(unsigned long long)));
  GPUMEM_EXPECT_CUDA(cudaMemsetAsync(bad, 0, sizeof(unsigned long long), cs.s));
  const int n = replays();
  for (int i = 0; i < n; ++i) {
    GPUMEM_EXPECT_CUDA(cudaMemsetAsync(replayed, 0xFF, TH * sizeof(float), cs.s));
    GPUMEM_EXPECT_CUDA(cudaGraphLaunch(exec, cs.s));
    compare<<<grid, block, 0, cs.s>>>(replayed, eager, TH, bad);
    if (i % 100 == 0) {
      // Other work through the same pool meanwhile: it must never get the graph's memory.
      void* junk = pool.allocate(TH * F * sizeof(float), side.s);
      gpumem::test::fill_pattern(junk, TH * F * sizeof(float), static_cast<std::uint64_t>(i) + 7, side.s);
      pool.deallocate(junk, TH * F * sizeof(float), side.s);
    }
  }
  unsigned long long wrong = 0;
  GPUMEM_EXPECT_CUDA(cudaMemcpyAsync(&wrong, bad, sizeof(wrong), cudaMemcpyDeviceToHost, cs.s));
  GPUMEM_EXPECT_CUDA(cudaStreamSynchronize(cs.s));
  GPUMEM_EXPECT_CUDA(cudaStreamSynchronize(side.s));
  EXPECT_EQ(wrong, 0u) << "words differing from the eager run over " << n << " replays";
  std::printf("%d replays checked against the eager layer: %llu words differ\n", n, wrong);

  // The eager layer still gives the same answer while the graph pool holds its memory.
  layer(pool, x, w, replayed, cs.s);
  compare<<<grid, block, 0, cs.s>>>(replayed, eager, TH, bad);
  GPUMEM_EXPECT_CUDA(cudaMemcpyAsync(&wrong, bad, sizeof(wrong), cudaMemcpyDeviceToHost, cs.s));
  GPUMEM_EXPECT_CUDA(cudaStreamSynchronize(cs.s));
  EXPECT_EQ(wrong, 0u);

  GPUMEM_EXPECT_CUDA(cudaGraphExecDestroy(exec));
  GPUMEM_EXPECT_CUDA(cudaGraphDestroy(graph));
  pool.release_graph_pool(g, cs.s);
  EXPECT_THROW(pool.graph_stats(g), std::logic_error) << "a released graph pool with nothing live is gone";
  GPUMEM_EXPECT_CUDA(cudaFree(bad));
  for (float* p : {x, eager, replayed}) pool.deallocate(p, TH * sizeof(float), cs.s);
  pool.deallocate(w, 64 * sizeof(float), cs.s);
  GPUMEM_EXPECT_CUDA(cudaStreamSynchronize(cs.s));
}

INSTANTIATE_TEST_SUITE_P(Modes, GraphCapture,
                         ::testing::Values(cudaStreamCaptureModeGlobal, cudaStreamCaptureModeThreadLocal),
                         [](const auto& i) {
                           return std::string(i.param == cudaStreamCaptureModeGlobal ? "Global" : "ThreadLocal");
                         });

// With no graph pool scope, the pool refuses to record an event into a capture rather than put
// its bookkeeping into the graph.
TEST(GraphCaptureOrdering, NoEventIsRecordedIntoACapture) {
  GPUMEM_REQUIRE_GPU();
  gpumem::cuda_ordering ord;
  stream_holder s;
  GPUMEM_EXPECT_CUDA(cudaStreamBeginCapture(s.s, cudaStreamCaptureModeThreadLocal));
  try {
    (void)ord.record(s.s);
    ADD_FAILURE() << "an event was recorded on a capturing stream";
  } catch (const std::logic_error& e) {
    EXPECT_NE(std::string(e.what()).find("begin_capture"), std::string::npos) << e.what();
  }
  EXPECT_THROW(ord.stream_wait(s.s, 0), std::logic_error);
  cudaGraph_t graph = nullptr;
  GPUMEM_EXPECT_CUDA(cudaStreamEndCapture(s.s, &graph));
  GPUMEM_EXPECT_CUDA(cudaGraphDestroy(graph));
  const gpumem::event_ref e = ord.record(s.s);  // after the capture: an ordinary event
  ord.synchronize(e);
  ord.release(e);
}

}  // namespace
