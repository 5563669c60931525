#pragma once
// Traces named on the command line: a path, or `-` for standard input (plain or gzip, like a file).
// A trace read from standard input is named `<stdin>` in every output and message.
#include <string>
#include <string_view>
#include <vector>

#include "gpumem/trace.hpp"

namespace gpumem::tools {

inline constexpr std::string_view stdin_path = "-";
inline constexpr std::string_view stdin_name = "<stdin>";

// Reads `path` (`-`: standard input). Throws trace_error naming the file (and line) on bad input.
trace load_trace(const std::string& path);

// Standard input can be read once: the text of the error when `-` is named more than once among
// `paths` (empty when it is not).
std::string stdin_named_twice(const std::vector<std::string>& paths);

}  // namespace gpumem::tools
