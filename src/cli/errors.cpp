#include "errors.hpp"

#include <cstdio>
#include <string>

namespace gpumem::tools {

void print_error(std::string_view command, std::string_view what) {
  // Drop a trailing newline or full stop some messages (CLI11's) carry, so every line ends alike.
  while (!what.empty() && (what.back() == '\n' || what.back() == ' ')) what.remove_suffix(1);
  const std::string who = command.empty() ? std::string("gpumem") : fmt::format("gpumem {}", command);
  std::fflush(stdout);  // what was printed before the error comes before it
  fmt::print(stderr, "{}: error: {}\n", who, what);
}

}  // namespace gpumem::tools
