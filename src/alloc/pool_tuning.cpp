// The ranges of the pool policy's numeric settings (gpumem/detail/pool_tuning.hpp).
#include "gpumem/detail/pool_tuning.hpp"

#include <fmt/format.h>

#include <stdexcept>

namespace gpumem::detail {

namespace {

struct range {
  const char* name;
  double pool_tuning::*field;
  double least;
  double most;
  bool zero_means_off;
  const char* requirement;  // what a good value is, for the error
};

constexpr range ranges[] = {
    {"idle_budget", &pool_tuning::idle_budget, 0.0, 1e6, false, "a fraction >= 0"},
    {"reserve_ceiling", &pool_tuning::reserve_ceiling, 1.0, 1e6, true, "0 (none) or a multiple of peak live >= 1"},
    {"front_cache_grow_fraction", &pool_tuning::front_cache_grow_fraction, 0.0, 1e3, false, "a fraction >= 0"},
    {"front_cache_reserve_headroom", &pool_tuning::front_cache_reserve_headroom, 0.0, 1e3, false, "a fraction >= 0"},
    {"front_cache_peak_fraction", &pool_tuning::front_cache_peak_fraction, 0.0, 1e3, false, "a fraction >= 0"},
    {"remap_time_budget", &pool_tuning::remap_time_budget, 0.0, 1.0, false, "a fraction of wall time in [0, 1]"},
    {"remap_cost_ns_per_granule", &pool_tuning::remap_cost_ns_per_granule, 0.0, 1e12, false, "a cost >= 0"},
};

}  // namespace

void check_pool_tuning(const pool_tuning& t) {
  for (const range& r : ranges) {
    const double v = t.*r.field;
    // NaN fails both comparisons.
    if ((r.zero_means_off && v == 0.0) || (v >= r.least && v <= r.most)) continue;
    throw std::invalid_argument(fmt::format("gpumem::pool: {} {} is not {}", r.name, v, r.requirement));
  }
}

}  // namespace gpumem::detail
