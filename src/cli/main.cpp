// gpumem — the command-line tool. Thin over the library: each subcommand is one file in this folder.
#include <fmt/core.h>

#include <algorithm>
#include <exception>
#include <string>
#include <utility>

#include "command.hpp"
#include "errors.hpp"
#include "help_format.hpp"
#include "pool_option_args.hpp"

#ifndef GPUMEM_VERSION
#error "GPUMEM_VERSION (the project's version) must be defined by the build"
#endif

namespace gpumem::tools {
std::vector<command>& registry() {
  static std::vector<command> commands;
  return commands;
}

namespace {

// "bench, doctor, ...": the commands there are, for errors naming one that is not.
std::string command_names(CLI::App& app) {
  std::string names;
  for (const CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; }))
    names += (names.empty() ? "" : ", ") + sub->get_name();
  return names;
}

// `gpumem help [CMD]`: the whole tool's help, or one subcommand's. An unknown CMD is an error.
void add_help_command(CLI::App& app, int& exit_code) {
  CLI::App* help = app.add_subcommand("help", "Show the help of gpumem or of one command (gpumem help replay)");
  auto topic = std::make_shared<std::string>();
  help->add_option("command", *topic, "the command to explain (default: all of gpumem)");
  help->footer("Example:\n  gpumem help doctor");
  help->callback([&app, topic, &exit_code] {
    if (topic->empty()) {  // app.help() would give help's own: it is the subcommand being run
      fmt::print("{}", app.get_formatter()->make_help(&app, app.get_name(), CLI::AppFormatMode::Normal));
      exit_code = exit_ok;
      return;
    }
    for (const CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; }))
      if (sub->get_name() == *topic) {
        fmt::print("{}", sub->help(app.get_name()));
        exit_code = exit_ok;
        return;
      }
    print_error("help", "unknown command '{}' (the commands: {})", *topic, command_names(app));
    exit_code = exit_unavailable;
  });
}

// The subcommand a parse error belongs to: the one being parsed, else none.
std::string failing_command(const CLI::App& app) {
  const auto parsed = app.get_subcommands();
  return parsed.empty() ? std::string() : parsed.back()->get_name();
}

}  // namespace
}  // namespace gpumem::tools

int main(int argc, char** argv) {
  using namespace gpumem::tools;
  CLI::App app{"gpumem: GPU memory allocation — inspect, replay, benchmark and diagnose"};
  app.name("gpumem");
  app.formatter(std::make_shared<help_formatter>());  // before the subcommands: they take it over
  app.set_version_flag("--version", "gpumem " GPUMEM_VERSION, "Print gpumem's version and exit");
  app.require_subcommand(1);
  app.footer("Run `gpumem help CMD` or `gpumem CMD --help` for one command's options and an example.\n"
             "A trace given as `-` is read from standard input.");
  int exit_code = exit_ok;
  auto& commands = registry();
  std::sort(commands.begin(), commands.end(),
            [](const command& a, const command& b) { return a.name < b.name; });
  for (auto& c : commands) {
    CLI::App* sub = app.add_subcommand(c.name, c.help);
    c.setup(*sub, exit_code);
  }
  add_help_command(app, exit_code);
  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {  // --help, --version
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    const std::string command = failing_command(app);
    // Where CLI11 would say "A subcommand is required", say which there are.
    if (argc == 1)
      print_error("", "no command given (the commands: {}); `gpumem help` explains them", command_names(app));
    else if (command.empty() && argv[1][0] != '-')
      print_error("", "unknown command '{}' (the commands: {})", argv[1], command_names(app));
    else if (const auto subs = std::as_const(app).get_subcommands(
                 [&](const CLI::App* sub) { return sub->get_name() == command; });
             subs.size() == 1 && dynamic_cast<const CLI::ExtrasError*>(&e) && takes_pool_options(*subs.front()))
      // A flag that set one of the pool policy's settings once: say which flags the pool takes.
      print_error(command, fmt::format("{} (its pool options: {}; `gpumem options` lists them)", e.what(),
                                       pool_option_flag_list()));
    else
      print_error(command, e.what());
    return exit_unavailable;
  } catch (const std::exception& e) {
    print_error(failing_command(app), e.what());
    return exit_unavailable;
  }
  return exit_code;
}
