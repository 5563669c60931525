#include <cuda_runtime.h>

#include "gpu_test_support.hpp"

namespace gpumem::test {
namespace {

constexpr std::size_t edge_words = 1024;          // 4 KiB at each end
constexpr std::size_t stride_words = 16384;       // then one word per 64 KiB

__host__ __device__ std::size_t samples(std::size_t words) {
  return words <= 2 * edge_words ? words : 2 * edge_words + words / stride_words;
}

// The k-th sampled word of a block of `words` words.
__device__ std::size_t sample_word(std::size_t k, std::size_t words) {
  if (words <= 2 * edge_words) return k;
  if (k < edge_words) return k;
  if (k < 2 * edge_words) return words - 2 * edge_words + k;
  return (k - 2 * edge_words) * stride_words + edge_words;
}

__device__ std::uint32_t pattern(std::uint64_t tag, std::size_t word) {
  std::uint64_t x = tag * 0x9E3779B97F4A7C15ull ^ (word + 0x632BE59BD9B4E019ull);
  x ^= x >> 31;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 29;
  return static_cast<std::uint32_t>(x);
}

__global__ void fill_kernel(std::uint32_t* p, std::size_t words, std::uint64_t tag) {
  const std::size_t n = samples(words);
  for (std::size_t k = blockIdx.x * blockDim.x + threadIdx.x; k < n; k += std::size_t(gridDim.x) * blockDim.x) {
    const std::size_t w = sample_word(k, words);
    p[w] = pattern(tag, w);
  }
}

__global__ void check_kernel(const std::uint32_t* p, std::size_t words, std::uint64_t tag,
                             unsigned long long* mismatches) {
  const std::size_t n = samples(words);
  unsigned long long bad = 0;
  for (std::size_t k = blockIdx.x * blockDim.x + threadIdx.x; k < n; k += std::size_t(gridDim.x) * blockDim.x) {
    const std::size_t w = sample_word(k, words);
    bad += p[w] != pattern(tag, w);
  }
  if (bad) atomicAdd(mismatches, bad);
}

__global__ void slow_write_kernel(std::uint32_t* p, std::size_t words, std::uint32_t value,
                                  long long cycles) {
  if (threadIdx.x == 0 && blockIdx.x == 0) {
    const long long start = clock64();
    while (clock64() - start < cycles) {
    }
  }
  __syncthreads();
  for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < words; i += std::size_t(gridDim.x) * blockDim.x)
    p[i] = value;
}

unsigned grid_for(std::size_t n) {
  const std::size_t g = (n + 255) / 256;
  return static_cast<unsigned>(g < 64 ? (g ? g : 1) : 64);
}

}  // namespace

void fill_pattern(void* p, std::size_t bytes, std::uint64_t tag, cudaStream_t s) {
  const std::size_t words = bytes / 4;
  if (!words) return;
  fill_kernel<<<grid_for(samples(words)), 256, 0, s>>>(static_cast<std::uint32_t*>(p), words, tag);
}

void check_pattern(const void* p, std::size_t bytes, std::uint64_t tag, cudaStream_t s,
                   unsigned long long* mismatches) {
  const std::size_t words = bytes / 4;
  if (!words) return;
  check_kernel<<<grid_for(samples(words)), 256, 0, s>>>(static_cast<const std::uint32_t*>(p), words,
                                                        tag, mismatches);
}

void slow_write(void* p, std::size_t bytes, std::uint32_t value, double ms, cudaStream_t s) {
  int khz = 0;
  int dev = 0;
  (void)cudaGetDevice(&dev);
  (void)cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, dev);
  const long long cycles = static_cast<long long>(ms * double(khz ? khz : 1500000));
  slow_write_kernel<<<1, 256, 0, s>>>(static_cast<std::uint32_t*>(p), bytes / 4, value, cycles);
}

}  // namespace gpumem::test
