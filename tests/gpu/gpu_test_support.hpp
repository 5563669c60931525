#pragma once
// Helpers every GPU test shares: skip with the reason when no GPU is visible, pattern kernels that
// prove memory is real and unshared, and small RAII holders for streams.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>

#include "gpumem/cuda/availability.hpp"

#define GPUMEM_REQUIRE_GPU()                                               \
  do {                                                                     \
    const auto& gpumem_gpu_ = ::gpumem::gpu_available();                   \
    if (!gpumem_gpu_) GTEST_SKIP() << "no GPU: " << gpumem_gpu_.reason;    \
  } while (0)

#define GPUMEM_EXPECT_CUDA(call) ASSERT_EQ((call), cudaSuccess) << #call << ": " << cudaGetErrorName(cudaGetLastError())

namespace gpumem::test {

// Pattern kernels (test_kernels.cu). The pattern is a hash of (tag, word index), so blocks with
// different tags hold different bytes and overlap or stale reuse shows as mismatches. Only a
// sample of words is written and checked on big blocks (first and last 4 KiB, then one word every
// 64 KiB): enough to catch overlap and bad mappings, cheap enough for 10^6 blocks.
void fill_pattern(void* p, std::size_t bytes, std::uint64_t tag, cudaStream_t s);
// Adds the number of mismatching sampled words to *mismatches (device memory).
void check_pattern(const void* p, std::size_t bytes, std::uint64_t tag, cudaStream_t s,
                   unsigned long long* mismatches);
// Keeps `s` busy for about `ms` milliseconds, then writes `value` to every 4-byte word of p.
void slow_write(void* p, std::size_t bytes, std::uint32_t value, double ms, cudaStream_t s);

struct stream_holder {
  cudaStream_t s = nullptr;
  stream_holder() { (void)cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking); }
  ~stream_holder() { if (s) (void)cudaStreamDestroy(s); }
  stream_holder(const stream_holder&) = delete;
  stream_holder& operator=(const stream_holder&) = delete;
};

}  // namespace gpumem::test
