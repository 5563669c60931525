// Does memory made of separately created physical handles stream slower than cudaMalloc's, and
// does a larger handle fix it? On the H200 a 1 GiB copy through gpumem's default memory (2 MiB
// handles mapped one by one) ran 14-24 % below the same copy through cudaMalloc (bench/RESULTS.md,
// session 4). For handle sizes 2..512 MiB and for cudaMalloc: two 1 GiB ranges, a device-to-device
// copy between them, and a kernel that reads one and writes the other; GB/s moved (read + write),
// medians of 20, CUDA-event timing.
// Standalone: nvcc -O2 -arch=sm_90 vmm_bandwidth.cu -lcuda -o vmm_bandwidth
#include <cuda.h>
#include <cuda_runtime.h>
#include <algorithm>
#include <cstdio>
#include <vector>
#define CK(x) do { CUresult r_ = (x); if (r_ != CUDA_SUCCESS) { const char* n; cuGetErrorName(r_, &n); std::printf("FAIL %s: %s (line %d)\n", #x, n, __LINE__); return 1; } } while (0)
#define CR(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { std::printf("FAIL %s: %s (line %d)\n", #x, cudaGetErrorName(e_), __LINE__); return 1; } } while (0)

__global__ void stream_copy(const float4* __restrict__ in, float4* __restrict__ out, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) out[i] = in[i];
}

// Medians of `reps` timings of `run` (which enqueues on the default stream), as GB/s for `bytes`
// read and `bytes` written.
template <class Run>
double gbps(size_t bytes, int reps, Run&& run) {
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  std::vector<float> ms;
  for (int r = 0; r < reps + 3; ++r) {
    cudaEventRecord(a);
    run();
    cudaEventRecord(b);
    cudaEventSynchronize(b);
    float t = 0;
    cudaEventElapsedTime(&t, a, b);
    if (r >= 3) ms.push_back(t);  // the first runs warm up
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::sort(ms.begin(), ms.end());
  return 2.0 * double(bytes) / (ms[ms.size() / 2] / 1e3) / 1e9;
}

int main() {
  CR(cudaSetDevice(0));
  CR(cudaFree(0));
  const size_t total = size_t(1) << 30;
  const int reps = 20;
  int sms = 0;
  CR(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  std::printf("memory             memcpy_GBps  kernel_GBps\n");
  auto measure = [&](const char* what, char* src, char* dst) {
    const double c = gbps(total, reps, [&] { cudaMemcpyAsync(dst, src, total, cudaMemcpyDeviceToDevice); });
    const double k = gbps(total, reps, [&] {
      stream_copy<<<sms * 8, 256>>>(reinterpret_cast<const float4*>(src), reinterpret_cast<float4*>(dst), total / 16);
    });
    std::printf("%-18s %11.0f  %11.0f\n", what, c, k);
  };

  {
    char *src = nullptr, *dst = nullptr;
    CR(cudaMalloc(&src, total));
    CR(cudaMalloc(&dst, total));
    CR(cudaMemset(src, 1, total));
    measure("cudaMalloc", src, dst);
    CR(cudaFree(src));
    CR(cudaFree(dst));
  }

  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  CUmemAccessDesc acc{};
  acc.location = prop.location;
  acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  size_t granule = 0;
  CK(cuMemGetAllocationGranularity(&granule, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
  // One layout of handles: `hs`-byte handles mapped over two 1 GiB ranges reserved at `align`,
  // access set once for the whole range or once per handle (gpumem sets it per run of handles).
  auto mapped = [&](const char* label, size_t hs, size_t align, bool access_per_handle) -> int {
    if (hs % granule) return 0;
    const size_t n = total / hs;
    CUdeviceptr base;
    CK(cuMemAddressReserve(&base, 2 * total, align, 0, 0));
    std::vector<CUmemGenericAllocationHandle> h(2 * n);
    for (size_t i = 0; i < 2 * n; ++i) {
      CK(cuMemCreate(&h[i], hs, &prop, 0));
      CK(cuMemMap(base + i * hs, hs, 0, h[i], 0));
      if (access_per_handle) CK(cuMemSetAccess(base + i * hs, hs, &acc, 1));
    }
    if (!access_per_handle) CK(cuMemSetAccess(base, 2 * total, &acc, 1));
    char* src = reinterpret_cast<char*>(base);
    CR(cudaMemset(src, 1, total));
    measure(label, src, src + total);
    CK(cuMemUnmap(base, 2 * total));
    for (auto x : h) CK(cuMemRelease(x));
    CK(cuMemAddressFree(base, 2 * total));
    return 0;
  };
  char label[48];
  for (size_t hs : {size_t(2) << 20, size_t(8) << 20, size_t(32) << 20, size_t(128) << 20, size_t(512) << 20,
                    size_t(1024) << 20}) {
    std::snprintf(label, sizeof label, "handles of %zu MiB", hs >> 20);
    if (mapped(label, hs, granule, false)) return 1;
  }
  // Does the place matter rather than the handle: 2 MiB handles in a range aligned to 1 GiB, and
  // with access set handle by handle.
  if (mapped("2 MiB, 1 GiB align", size_t(2) << 20, total, false)) return 1;
  if (mapped("2 MiB, access each", size_t(2) << 20, granule, true)) return 1;
  // And cudaMalloc's memory at an offset of 2 MiB inside a larger allocation (not 1 GiB-aligned).
  {
    char* big = nullptr;
    CR(cudaMalloc(&big, 2 * total + (size_t(4) << 20)));
    char* src = big + (size_t(2) << 20);
    CR(cudaMemset(src, 1, total));
    measure("cudaMalloc +2 MiB", src, src + total + (size_t(2) << 20));
    CR(cudaFree(big));
  }
  return 0;
}
