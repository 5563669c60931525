// The upstream interface's defaults.
#include <cstdint>

#include "gpumem/upstream.hpp"

namespace gpumem {

void upstream::map_run(void* at, std::size_t bytes_each, const physical_handle* handles, std::size_t count) {
  auto* base = static_cast<std::byte*>(at);
  std::size_t done = 0;
  try {
    for (; done < count; ++done) map(base + done * bytes_each, bytes_each, handles[done]);
  } catch (...) {
    if (done) unmap(base, done * bytes_each);  // all or none
    throw;
  }
}

}  // namespace gpumem
