#include "front_lock.hpp"

#include <linux/membarrier.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace gpumem::detail {
namespace {
bool register_expedited() noexcept {
  const long supported = syscall(__NR_membarrier, MEMBARRIER_CMD_QUERY, 0, 0);
  if (supported < 0 || !(supported & MEMBARRIER_CMD_PRIVATE_EXPEDITED)) return false;
  return syscall(__NR_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0) == 0;
}
}  // namespace

bool asymmetric_fence_available() noexcept {
  static const bool available = register_expedited();
  return available;
}

void heavy_fence() noexcept {
  // Registration (asymmetric_fence_available) is what can fail; after it this call cannot.
  syscall(__NR_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0);
}

}  // namespace gpumem::detail
