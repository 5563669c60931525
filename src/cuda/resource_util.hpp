#pragma once
// What the standalone CUDA resources share: argument checks and the out_of_memory they throw when
// the CUDA allocator refuses.
#include <cuda_runtime_api.h>

#include <cstddef>

#include "gpumem/core.hpp"

namespace gpumem::cuda_detail {

// std::invalid_argument unless `alignment` is a power of two no larger than what `who`'s allocator
// guarantees (`max_alignment`).
void check_alignment(const char* who, std::size_t alignment, std::size_t max_alignment);

// Throws gpumem::out_of_memory for a refused request, carrying the device's free/total figures.
[[noreturn]] void throw_oom(const char* who, const char* call, std::size_t bytes,
                            std::size_t alignment, stream_ref s, cudaError_t rc);

}  // namespace gpumem::cuda_detail
