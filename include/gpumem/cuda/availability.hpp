#pragma once
// Is there a GPU to run on? Asked by the GPU tests (which skip, stating the reason, when not) and
// by the CLI (which says so and exits 2). Never throws.
#include <string>

namespace gpumem {

struct gpu_status {
  bool available = false;
  int device_count = 0;
  std::string reason;   // why not, in words; empty when available
  explicit operator bool() const noexcept { return available; }
};

// Cached after the first call: the answer does not change within a process.
const gpu_status& gpu_available() noexcept;

}  // namespace gpumem
