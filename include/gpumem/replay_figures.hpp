#pragma once
// The figures of a replay, named as `gpumem replay --json` names them, computed in one place so
// every tool that shows them (replay's JSON, the report's page) shows the same numbers under the
// same names.
#include <string>
#include <vector>

#include "gpumem/replay.hpp"

namespace gpumem {

struct replay_figure {
  std::string key;        // snake_case, its unit in the name where it has one
  double value = 0.0;
  bool integral = false;  // a count or a byte size: print without a fraction
};

// True for the pool resources (ours, simulated or on the GPU): they have pool_stats figures.
bool replay_is_pool(const replay_result& r) noexcept;

// The scalar figures of `r`: ops, peak and final bytes, fragmentation, ns_per_op, failures; and for
// a pool its upstream and front-cache counts. A soak's pass log and the integrity checks are not
// among them.
std::vector<replay_figure> replay_figures(const replay_result& r);

}  // namespace gpumem
