#pragma once
// Counts on the command line (`--ops 1e8`, `--verify-every 256`): a whole number, written out or in
// scientific notation as long as it stays whole (1e8, 2.5e7; not 1.5e0). Nothing negative.
#include <cstdint>
#include <string>

namespace gpumem::tools {
// Throws std::invalid_argument naming the text and why it is not a count.
std::uint64_t parse_count(const std::string& text);
}  // namespace gpumem::tools
