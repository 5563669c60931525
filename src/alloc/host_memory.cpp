#include "gpumem/host_memory.hpp"

#include <unistd.h>

namespace gpumem {

std::size_t physical_ram_bytes() noexcept {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? std::size_t(pages) * std::size_t(page) : 0;
}

std::size_t default_pinned_cap_bytes() noexcept { return physical_ram_bytes() / 5; }

}  // namespace gpumem
