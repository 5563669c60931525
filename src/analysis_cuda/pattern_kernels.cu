// Kernels behind the GPU soak's data check. Grid-stride loops over the block's whole words, so one
// launch shape serves 8 B and 180 MB blocks alike; the check adds each thread's count with one
// atomicAdd (none when it found nothing), so a clean check costs no contention.
#include <cuda_runtime.h>

#include "verify_pattern.hpp"
#include "cuda_check.hpp"
#include "pattern_kernels.hpp"

namespace gpumem::cuda_detail {
namespace {

using verify_detail::verify_pattern;
using verify_detail::word_bytes;

constexpr unsigned block_threads = 256;
constexpr std::size_t max_blocks = 1024;  // enough resident blocks to fill every SM of a large GPU

__global__ void stamp_kernel(std::uint32_t* words, std::size_t count, std::uint64_t tag) {
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < count;
       i += std::size_t(gridDim.x) * blockDim.x)
    words[i] = verify_pattern(tag, i);
}

__global__ void check_kernel(const std::uint32_t* words, std::size_t count, std::uint64_t tag,
                             unsigned long long* mismatched_words) {
  unsigned long long bad = 0;
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < count;
       i += std::size_t(gridDim.x) * blockDim.x)
    bad += words[i] != verify_pattern(tag, i);
  if (bad) atomicAdd(mismatched_words, bad);
}

unsigned blocks_for(std::size_t words) {
  const std::size_t b = (words + block_threads - 1) / block_threads;
  return static_cast<unsigned>(b < max_blocks ? b : max_blocks);
}

}  // namespace

void launch_stamp(void* p, std::size_t bytes, std::uint64_t tag, cudaStream_t s) {
  const std::size_t words = bytes / word_bytes;
  if (!words) return;
  stamp_kernel<<<blocks_for(words), block_threads, 0, s>>>(static_cast<std::uint32_t*>(p), words, tag);
  GPUMEM_CUDA_CHECK(cudaGetLastError());
}

void launch_check(const void* p, std::size_t bytes, std::uint64_t tag, unsigned long long* mismatched_words,
                  cudaStream_t s) {
  const std::size_t words = bytes / word_bytes;
  if (!words) return;
  check_kernel<<<blocks_for(words), block_threads, 0, s>>>(static_cast<const std::uint32_t*>(p), words, tag,
                                                            mismatched_words);
  GPUMEM_CUDA_CHECK(cudaGetLastError());
}

}  // namespace gpumem::cuda_detail
