#pragma once
// The host's physical RAM and the default cap on page-locked (pinned) host memory. CUDA-free, so
// the doctor can judge a pinned-allocation trace against the same cap pinned_host_resource
// enforces, on machines with no CUDA at all.
#include <cstddef>

namespace gpumem {

// Physical RAM (sysconf: pages x page size); 0 when the system does not say.
std::size_t physical_ram_bytes() noexcept;
// 20% of physical RAM. Pinned pages cannot be swapped, so a process that pins much more than this
// leaves the rest of the machine too little pageable memory: it swaps, or the OOM killer steps in.
std::size_t default_pinned_cap_bytes() noexcept;

}  // namespace gpumem
