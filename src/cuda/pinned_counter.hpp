#pragma once
// The process-wide count of host bytes gpumem has pinned (cudaMallocHost + cudaHostRegister).
#include <atomic>
#include <cstddef>

namespace gpumem::cuda_detail {
std::atomic<std::size_t>& pinned_counter() noexcept;
}  // namespace gpumem::cuda_detail
