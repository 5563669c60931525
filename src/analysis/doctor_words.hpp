#pragma once
// How the doctor's findings word their numbers, shared by every file that builds findings so they
// all read alike: byte sizes in binary units, figures made with their kind (count or ratio).
#include <fmt/format.h>

#include <cstdint>
#include <string>
#include <utility>

#include "gpumem/doctor.hpp"

namespace gpumem::detail {

inline std::string bytes_text(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024.0 && u < 4) {
    b /= 1024.0;
    ++u;
  }
  return u == 0 ? fmt::format("{:.0f} B", b) : fmt::format("{:.1f} {}", b, units[u]);
}

inline figure count(std::string key, std::uint64_t v) { return {std::move(key), static_cast<double>(v), true}; }
inline figure ratio(std::string key, double v) { return {std::move(key), v, false}; }

inline double share(std::uint64_t part, std::uint64_t whole) {
  return whole == 0 ? 0.0 : static_cast<double>(part) / static_cast<double>(whole);
}

}  // namespace gpumem::detail
