// gpumem — the command-line tool. Thin over the library: each subcommand is one file in this folder.
#include <fmt/core.h>

#include <algorithm>
#include <exception>

#include "command.hpp"

namespace gpumem::tools {
std::vector<command>& registry() {
  static std::vector<command> commands;
  return commands;
}
}  // namespace gpumem::tools

int main(int argc, char** argv) {
  using namespace gpumem::tools;
  CLI::App app{"gpumem: GPU memory allocation — inspect, replay, benchmark and diagnose"};
  app.require_subcommand(1);
  int exit_code = exit_ok;
  auto& commands = registry();
  std::sort(commands.begin(), commands.end(),
            [](const command& a, const command& b) { return a.name < b.name; });
  for (auto& c : commands) {
    CLI::App* sub = app.add_subcommand(c.name, c.help);
    c.setup(*sub, exit_code);
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : exit_unavailable;
  } catch (const std::exception& e) {
    fmt::print(stderr, "gpumem: error: {}\n", e.what());
    return exit_unavailable;
  }
  return exit_code;
}
