#pragma once
// One error style for every subcommand: `gpumem CMD: error: WHAT` on stderr, one line, where WHAT
// begins with FILE:LINE when the error is about a place in a file (a trace_error's text does).
#include <fmt/format.h>

#include <string_view>
#include <utility>

namespace gpumem::tools {

// `command` is the subcommand's name ("replay"); empty for errors before one is known ("gpumem: error: ...").
void print_error(std::string_view command, std::string_view what);

template <typename... Args>
void print_error(std::string_view command, fmt::format_string<Args...> format, Args&&... args) {
  print_error(command, std::string_view(fmt::format(format, std::forward<Args>(args)...)));
}

}  // namespace gpumem::tools
