#pragma once
// The soak's stamp and check kernels (pattern_kernels.cu): the pattern of src/analysis/verify_pattern.hpp
// written over, or compared with, every whole 32-bit word of a block. Both are enqueued on a
// stream and return at once; a launch failure throws gpumem::cuda_error.
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace gpumem::cuda_detail {

void launch_stamp(void* p, std::size_t bytes, std::uint64_t tag, cudaStream_t s);
// Adds the number of words that differ to *mismatched_words (device memory), atomically.
void launch_check(const void* p, std::size_t bytes, std::uint64_t tag, unsigned long long* mismatched_words,
                  cudaStream_t s);

}  // namespace gpumem::cuda_detail
