#include "trace_input.hpp"

#include <algorithm>
#include <iostream>

namespace gpumem::tools {

trace load_trace(const std::string& path) {
  if (path == stdin_path) return parse_trace(std::cin, std::string(stdin_name));
  return read_trace(path);
}

std::string stdin_named_twice(const std::vector<std::string>& paths) {
  if (std::count(paths.begin(), paths.end(), std::string(stdin_path)) < 2) return {};
  return "`-` (standard input) is named more than once: it can be read only once";
}

}  // namespace gpumem::tools
