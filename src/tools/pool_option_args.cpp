#include "tools/pool_option_args.hpp"

#include <string>

namespace gpumem::tools {

CLI::Option* add_idle_budget_option(CLI::App& app, double& budget, const char* what) {
  return app
      .add_option("--idle-budget", budget,
                  std::string(what) +
                      ": pool_options::idle_budget, idle mapped memory kept as a fraction of live rather than "
                      "remapped elsewhere (0, the default, is the tightest; more trades memory for driver calls)")
      ->check(CLI::Number)
      ->check(CLI::Range(0.0, 1e6))
      ->capture_default_str();
}

}  // namespace gpumem::tools
