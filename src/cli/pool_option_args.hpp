#pragma once
// Pool options on the command line of every subcommand that makes pools (`replay`, `bench`): one
// flag per entry of gpumem's pool option table (gpumem/pool_option_table.hpp), so their names,
// checks and help are the table's, the same here as in GPUMEM_CONFIG and bench's JSON.
#include <CLI/CLI.hpp>

#include <string>

#include "gpumem/pool.hpp"

namespace gpumem::tools {

// A flag per pool option ("--max-reserved-bytes 8G", "--[no-]zero-on-free", "--initial-reserve 1G"),
// written into `opts` for the subcommand's gpumem pools; a bad value is refused naming the flag.
// `what` says which pools the subcommand applies them to ("pool resources", "gpumem's pool").
void add_pool_option_flags(CLI::App& app, pool_options& opts, const char* what);
// Whether `app` took the pool's flags (add_pool_option_flags).
bool takes_pool_options(const CLI::App& app);
// The pool's flags, for errors: "--small-max-bytes, --release-threshold-bytes, ...".
std::string pool_option_flag_list();

}  // namespace gpumem::tools
