#pragma once
// How `--help` shows options: CLI11's own layout, but a flag with a "--no-" twin is shown as
// "--zero-on-free,--no-zero-on-free" without the value each name sets ("{false}"), which read as
// the flag's default. Where a default matters it is shown as it is: "(default: off)", "=max".
#include <CLI/CLI.hpp>

#include <string>

namespace gpumem::tools {

class help_formatter : public CLI::Formatter {
 public:
  std::string make_option_name(const CLI::Option* opt, bool is_positional) const override;
};

}  // namespace gpumem::tools
