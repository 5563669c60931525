#include "tools/byte_size.hpp"

#include <fmt/format.h>

#include <charconv>
#include <limits>
#include <stdexcept>

namespace gpumem::tools {

std::size_t parse_byte_size(const std::string& text) {
  std::size_t value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end == text.data())
    throw std::invalid_argument(fmt::format("'{}' is not a byte size (a number, optionally with K, M, G or T)", text));
  std::string suffix(end, text.data() + text.size());
  if (!suffix.empty() && (suffix.back() == 'B' || suffix.back() == 'b')) suffix.pop_back();
  if (suffix.size() == 2 && (suffix[1] == 'i' || suffix[1] == 'I')) suffix.pop_back();
  unsigned shift = 0;
  if (suffix.empty()) shift = 0;
  else if (suffix == "K" || suffix == "k") shift = 10;
  else if (suffix == "M" || suffix == "m") shift = 20;
  else if (suffix == "G" || suffix == "g") shift = 30;
  else if (suffix == "T" || suffix == "t") shift = 40;
  else throw std::invalid_argument(fmt::format("'{}': unknown size suffix '{}'", text, suffix));
  if (value > (std::numeric_limits<std::size_t>::max() >> shift))
    throw std::invalid_argument(fmt::format("'{}' is too large", text));
  return value << shift;
}

}  // namespace gpumem::tools
