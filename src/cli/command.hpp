#pragma once
// Each CLI subcommand lives in its own file and registers itself here, so adding one touches no
// central list.
#include <CLI/CLI.hpp>

#include <functional>
#include <string>
#include <vector>

namespace gpumem::tools {

// A subcommand's setup: adds its options to `app` (a subcommand created for it) and sets the
// callback that runs it. The callback returns the process exit code through `exit_code`.
struct command {
  std::string name;
  std::string help;
  std::function<void(CLI::App& sub, int& exit_code)> setup;
};

std::vector<command>& registry();

struct registrar {
  explicit registrar(command c) { registry().push_back(std::move(c)); }
};

// Exit codes shared by every subcommand.
inline constexpr int exit_ok = 0;
inline constexpr int exit_failure = 1;       // the work ran and found a failure
inline constexpr int exit_unavailable = 2;   // bad input, or the device needed is not there

}  // namespace gpumem::tools
