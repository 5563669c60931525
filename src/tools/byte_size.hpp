#pragma once
// Byte counts on the command line: plain numbers or with a K/M/G/T suffix (powers of 1024).
#include <cstddef>
#include <string>

namespace gpumem::tools {
// Throws std::invalid_argument naming the text and why it is not a size.
std::size_t parse_byte_size(const std::string& text);
}  // namespace gpumem::tools
