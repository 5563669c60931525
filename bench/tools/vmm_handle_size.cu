// Does the cost of mapping go by 2 MiB page or by physical allocation? The slow path moves memory
// in 2 MiB granules (each its own cuMemCreate handle); if cuMemSetAccess / cuMemUnmap cost per
// handle rather than per page, larger handles would make every move cheaper per byte.
// For handle sizes 2..128 MiB: create, map, set access, unmap and a remap cycle (unmap, map, set
// access at another address), reported per MiB; 256 MiB moved each way.
// Standalone: nvcc -O2 -arch=sm_90 vmm_handle_size.cu -lcuda -o vmm_handle_size
#include <cuda.h>
#include <cuda_runtime.h>
#include <chrono>
#include <cstdio>
#include <vector>
#define CK(x) do { CUresult r_ = (x); if (r_ != CUDA_SUCCESS) { const char* n; cuGetErrorName(r_, &n); std::printf("FAIL %s: %s (line %d)\n", #x, n, __LINE__); return 1; } } while (0)
using clk = std::chrono::steady_clock;
static double us(clk::time_point a) { return std::chrono::duration<double, std::micro>(clk::now() - a).count(); }
__global__ void touch(char* p, size_t n) { for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) p[i] = 1; }
int main() {
  cudaSetDevice(0); cudaFree(0);
  CUmemAllocationProp prop{}; prop.type = CU_MEM_ALLOCATION_TYPE_PINNED; prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE; prop.location.id = 0;
  size_t G = 0; CK(cuMemGetAllocationGranularity(&G, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
  const size_t total = size_t(256) << 20;
  CUdeviceptr base; CK(cuMemAddressReserve(&base, total * 2, G, 0, 0));
  CUmemAccessDesc acc{}; acc.location = prop.location; acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  std::printf("handle_MiB create_us/MiB map_us/MiB setaccess_us/MiB unmap_us/MiB remap_cycle_us/MiB setaccess_whole_us/MiB\n");
  for (size_t hs : {size_t(2) << 20, size_t(8) << 20, size_t(32) << 20, size_t(128) << 20}) {
    const int n = int(total / hs);
    const double mib = double(total >> 20);
    std::vector<CUmemGenericAllocationHandle> h(n);
    auto t = clk::now(); for (int i = 0; i < n; ++i) CK(cuMemCreate(&h[i], hs, &prop, 0)); double create = us(t) / mib;
    t = clk::now(); for (int i = 0; i < n; ++i) CK(cuMemMap(base + i * hs, hs, 0, h[i], 0)); double map = us(t) / mib;
    t = clk::now(); for (int i = 0; i < n; ++i) CK(cuMemSetAccess(base + i * hs, hs, &acc, 1)); double sa = us(t) / mib;
    touch<<<1024, 256>>>((char*)base, total); CK(cuCtxSynchronize());
    t = clk::now(); for (int i = 0; i < n; ++i) CK(cuMemUnmap(base + i * hs, hs)); double unmap = us(t) / mib;
    // remap: every handle to the other half, then back (unmap + map + set access each), twice.
    for (int i = 0; i < n; ++i) { CK(cuMemMap(base + i * hs, hs, 0, h[i], 0)); }
    CK(cuMemSetAccess(base, total, &acc, 1));
    t = clk::now();
    for (int round = 0; round < 2; ++round) {
      CUdeviceptr from = base + (round % 2) * total, to = base + ((round + 1) % 2) * total;
      for (int i = 0; i < n; ++i) { CK(cuMemUnmap(from + i * hs, hs)); CK(cuMemMap(to + i * hs, hs, 0, h[i], 0)); CK(cuMemSetAccess(to + i * hs, hs, &acc, 1)); }
    }
    double cycle = us(t) / (2 * mib);
    // set access once over the whole 256 MiB after mapping every handle (one call)
    for (int i = 0; i < n; ++i) CK(cuMemUnmap(base + i * hs, hs));
    for (int i = 0; i < n; ++i) CK(cuMemMap(base + total + i * hs, hs, 0, h[i], 0));
    t = clk::now(); CK(cuMemSetAccess(base + total, total, &acc, 1)); double whole = us(t) / mib;
    CK(cuMemUnmap(base + total, total));
    for (int i = 0; i < n; ++i) CK(cuMemRelease(h[i]));
    std::printf("%zu %.2f %.2f %.2f %.2f %.2f %.2f\n", hs >> 20, create, map, sa, unmap, cycle, whole);
  }
  return 0;
}
