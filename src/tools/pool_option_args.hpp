#pragma once
// Pool options that more than one subcommand takes on its command line (`replay`, `bench`), added
// in one place so their name, checks and help stay the same everywhere.
#include <CLI/CLI.hpp>

namespace gpumem::tools {

// --idle-budget F: pool_options::idle_budget for the subcommand's gpumem pools. `what` says which
// pools the subcommand applies it to ("pool resources", "gpumem's pool").
CLI::Option* add_idle_budget_option(CLI::App& app, double& budget, const char* what);

}  // namespace gpumem::tools
