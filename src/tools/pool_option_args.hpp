#pragma once
// Pool options that more than one subcommand takes on its command line (`replay`, `bench`), added
// in one place so their name, checks and help stay the same everywhere.
#include <CLI/CLI.hpp>

#include "gpumem/pool.hpp"

namespace gpumem::tools {

// --idle-budget F and --grow-before-reclaim, written into `opts` (pool_options::idle_budget,
// pool_options::grow_before_reclaim) for the subcommand's gpumem pools. `what` says which pools
// the subcommand applies them to ("pool resources", "gpumem's pool").
void add_pool_tuning_options(CLI::App& app, pool_options& opts, const char* what);

}  // namespace gpumem::tools
