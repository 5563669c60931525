#include "count_arg.hpp"

#include <fmt/format.h>

#include <cctype>
#include <limits>
#include <stdexcept>

namespace gpumem::tools {

std::uint64_t parse_count(const std::string& text) {
  const auto bad = [&](const char* why) {
    return std::invalid_argument(fmt::format("'{}' is not a count ({}): write a whole number such as 256 or 1e8", text, why));
  };
  // Digits of the mantissa with the point dropped; `scale` = digits after the point.
  std::string digits;
  std::size_t i = 0, scale = 0;
  bool point = false;
  for (; i < text.size() && text[i] != 'e' && text[i] != 'E'; ++i) {
    if (text[i] == '.' && !point) {
      point = true;
    } else if (std::isdigit(static_cast<unsigned char>(text[i]))) {
      digits += text[i];
      scale += point;
    } else {
      throw bad(text[i] == '-' ? "negative" : "not a number");
    }
  }
  if (digits.empty()) throw bad("not a number");
  std::size_t exponent = 0;
  if (i < text.size()) {  // an exponent: e or E, then digits
    if (++i == text.size()) throw bad("no exponent after e");
    for (; i < text.size(); ++i) {
      if (!std::isdigit(static_cast<unsigned char>(text[i]))) throw bad(text[i] == '-' ? "not whole" : "not a number");
      exponent = exponent * 10 + std::size_t(text[i] - '0');
      if (exponent > 100) throw bad("too large");
    }
  }
  // Drop the fraction's trailing zeros, then it must fit in the exponent.
  while (scale && digits.back() == '0') {
    digits.pop_back();
    --scale;
  }
  if (scale > exponent) throw bad("not whole");
  digits.append(exponent - scale, '0');
  std::uint64_t value = 0;
  for (char c : digits) {
    const std::uint64_t d = std::uint64_t(c - '0');
    if (value > (std::numeric_limits<std::uint64_t>::max() - d) / 10) throw bad("too large");
    value = value * 10 + d;
  }
  return value;
}

}  // namespace gpumem::tools
