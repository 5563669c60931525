#pragma once
// The GPU soak's verifier for replay targets whose blocks are device memory: stamp and check run
// as kernels on the block's streams (pattern_kernels.cu); mismatches add up in one device counter
// that is read, with a device synchronize, only when asked (once per pass).
#include <memory>

#include "gpumem/replay_verifier.hpp"

namespace gpumem::cuda_detail {
std::unique_ptr<replay_verifier> make_pattern_verifier();
}  // namespace gpumem::cuda_detail
