// Cost of each CUDA virtual-memory driver call on 2 MiB granules, with the GPU idle and with a kernel
// running: the figures behind the slow path's design (docs/design-notes.md, bench/RESULTS.md).
// Standalone (not part of the CMake build): nvcc -O2 -arch=sm_90 vmm_call_cost.cu -lcuda -o vmm_call_cost
#include <cuda.h>
#include <cuda_runtime.h>
#include <chrono>
#include <cstdio>
#include <vector>
#define CK(x) do { CUresult r_ = (x); if (r_ != CUDA_SUCCESS) { const char* n; cuGetErrorName(r_, &n); std::printf("FAIL %s: %s (line %d)\n", #x, n, __LINE__); return 1; } } while (0)
using clk = std::chrono::steady_clock;
static double us(clk::time_point a) { return std::chrono::duration<double, std::micro>(clk::now() - a).count(); }
__global__ void spin(long long cycles) { long long t0 = clock64(); while (clock64() - t0 < cycles) {} }
__global__ void touch(char* p, size_t n) { for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) p[i] = 1; }
int main() {
  cudaSetDevice(0); cudaFree(0);
  CUmemAllocationProp prop{}; prop.type = CU_MEM_ALLOCATION_TYPE_PINNED; prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE; prop.location.id = 0;
  size_t G = 0; CK(cuMemGetAllocationGranularity(&G, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
  const int N = 512;
  CUdeviceptr base; CK(cuMemAddressReserve(&base, size_t(N) * G * 2, G, 0, 0));
  CUmemAccessDesc acc{}; acc.location = prop.location; acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  std::vector<CUmemGenericAllocationHandle> h(N);
  for (int pass = 0; pass < 2; ++pass) {
    const bool busy = pass == 1;
    if (busy) spin<<<1, 1>>>(2000000000LL);  // ~1 s of GPU work in flight during this pass
    auto t = clk::now();
    for (int i = 0; i < N; ++i) CK(cuMemCreate(&h[i], G, &prop, 0));
    double create = us(t) / N;
    t = clk::now(); for (int i = 0; i < 64; ++i) CK(cuMemMap(base + i * G, G, 0, h[i], 0)); double map1 = us(t) / 64;
    t = clk::now(); for (int i = 0; i < 64; ++i) CK(cuMemSetAccess(base + i * G, G, &acc, 1)); double acc1 = us(t) / 64;
    t = clk::now(); for (int i = 0; i < 64; ++i) CK(cuMemUnmap(base + i * G, G)); double unmap1 = us(t) / 64;
    // runs of 16: 16 cuMemMap + 1 cuMemSetAccess; 1 cuMemUnmap over the 16 mappings
    const int R = 16, runs = N / R;
    t = clk::now();
    for (int r = 0; r < runs; ++r) { for (int k = 0; k < R; ++k) CK(cuMemMap(base + (r * R + k) * G, G, 0, h[r * R + k], 0)); }
    double mapr = us(t) / runs;
    t = clk::now(); for (int r = 0; r < runs; ++r) CK(cuMemSetAccess(base + r * R * G, R * G, &acc, 1)); double accr = us(t) / runs;
    if (!busy) { touch<<<1024, 256>>>((char*)base, size_t(N) * G); CK(cuCtxSynchronize()); }
    t = clk::now(); for (int r = 0; r < runs; ++r) CK(cuMemUnmap(base + r * R * G, R * G)); double unmapr = us(t) / runs;
    // remap cycle of one granule: unmap + map + set access
    CK(cuMemMap(base, G, 0, h[0], 0)); CK(cuMemSetAccess(base, G, &acc, 1));
    t = clk::now();
    for (int i = 0; i < 200; ++i) {
      CUdeviceptr from = base + (i % 2) * N * G, to = base + ((i + 1) % 2) * N * G;
      CK(cuMemUnmap(from, G)); CK(cuMemMap(to, G, 0, h[0], 0)); CK(cuMemSetAccess(to, G, &acc, 1));
    }
    double cycle = us(t) / 200;
    CK(cuMemUnmap(base + (200 % 2) * N * G, G));
    t = clk::now(); for (int i = 0; i < N; ++i) CK(cuMemRelease(h[i])); double rel = us(t) / N;
    cudaError_t q = cudaStreamQuery(0);
    std::printf("%s G=%zu MiB: create %.1f us, map %.1f, setaccess %.1f, unmap %.1f | run of %d: maps %.1f, setaccess %.1f, unmap %.1f | remap cycle %.1f | release %.1f | kernel still running at end: %s\n",
                busy ? "BUSY" : "IDLE", G >> 20, create, map1, acc1, unmap1, R, mapr, accr, unmapr, cycle, rel, q == cudaErrorNotReady ? "yes" : "no");
    CK(cuCtxSynchronize());
  }
  return 0;
}
