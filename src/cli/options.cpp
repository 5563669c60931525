// `gpumem options [--markdown]`: the pool options every pool of the CLI takes (the flags of
// `replay` and `bench`, GPUMEM_CONFIG's keys), from the one table in gpumem/pool_option_table.hpp.
// `--markdown` prints docs/options.md as it must read (a test compares the two).
#include <fmt/core.h>

#include <memory>

#include "gpumem/pool_option_table.hpp"
#include "command.hpp"

namespace gpumem::tools {
namespace {

void print_text() {
  const pool_options defaults;
  for (const pool_option_spec& spec : pool_option_specs()) {
    std::string flags = pool_option_cli_names(spec);
    std::erase(flags, '!');
    fmt::print("{:<30} {:<7} default {:<5} {}\n", spec.name, pool_option_kind(spec),
               pool_option_text(defaults, spec), flags);
    fmt::print("    {}\n", spec.help);
  }
}

const registrar reg{command{
    "options", "List the pool options: GPUMEM_CONFIG keys, replay's and bench's flags, defaults",
    [](CLI::App& sub, int& exit_code) {
      auto markdown = std::make_shared<bool>(false);
      sub.add_flag("--markdown", *markdown, "print the table as Markdown (docs/options.md is this output)");
      sub.footer("Examples:\n  gpumem options\n  gpumem options --markdown > docs/options.md");
      sub.callback([markdown, &exit_code] {
        if (*markdown) fmt::print("{}", pool_options_markdown());
        else print_text();
        exit_code = exit_ok;
      });
    }}};

}  // namespace
}  // namespace gpumem::tools
