#pragma once
// The arena's moving policy on its own: idle granules moved before any growth (no idle budget, no
// reserve ceiling) and large blocks cached per thread (no step plan). Tests of the mechanisms
// under the default — front caches, kept mappings, stream-ordered moves, settle — run under it,
// so the policy's upper layers do not hide what they look at.
#include "gpumem/detail/pool_tuning.hpp"

namespace gpumem::test {

// Sets `t` (a pool_tuning, or the pool_config that holds one) to it.
inline void use_moving_policy(detail::pool_tuning& t) {
  t.idle_budget = 0.0;
  t.reserve_ceiling = 0.0;
  t.step_plan = false;
}
inline detail::pool_tuning moving_policy() {
  detail::pool_tuning t;
  use_moving_policy(t);
  return t;
}

}  // namespace gpumem::test
