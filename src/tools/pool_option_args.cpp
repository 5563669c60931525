#include "tools/pool_option_args.hpp"

#include <stdexcept>
#include <string>

#include "tools/byte_size.hpp"

namespace gpumem::tools {

namespace {

// A byte count (plain or with a K/M/G/T suffix) into `field`; a bad one is an error naming the option.
void add_byte_size_option(CLI::App& app, const std::string& name, std::size_t& field, const std::string& help) {
  app.add_option_function<std::string>(
         name,
         [&field, name](const std::string& v) {
           try {
             field = parse_byte_size(v);
           } catch (const std::invalid_argument& e) {
             throw CLI::ValidationError(name, e.what());
           }
         },
         help)
      ->type_name("BYTES");
}

// A number from 0 to `most` into `field`, its default shown in --help.
void add_number_option(CLI::App& app, const std::string& name, double& field, const std::string& help, double most) {
  app.add_option(name, field, help)->check(CLI::Number)->check(CLI::Range(0.0, most))->capture_default_str();
}

}  // namespace

void add_pool_tuning_options(CLI::App& app, pool_options& opts, const char* what) {
  add_number_option(app, "--idle-budget", opts.idle_budget,
                    std::string(what) +
                        ": pool_options::idle_budget, idle mapped memory kept as a fraction of live rather than "
                        "remapped elsewhere (0, the default, is the tightest; more trades memory for driver calls)",
                    1e6);
  add_number_option(app, "--reserve-ceiling", opts.reserve_ceiling,
                    std::string(what) +
                        ": pool_options::reserve_ceiling, the most peak reserved may be over peak live where moving "
                        "memory can keep it there (e.g. 1.03; past it idle memory moves whatever --idle-budget says; "
                        "0, the default: none)",
                    1e6);
  app.add_flag("--grow-before-reclaim", opts.grow_before_reclaim,
               std::string(what) +
                   ": pool_options::grow_before_reclaim, grow before emptying the front caches and giving back "
                   "empty slabs (faster, most of all with many threads; costs memory)");
  add_number_option(app, "--front-cache-reserve-headroom", opts.front_cache_reserve_headroom,
                    std::string(what) +
                        ": pool_options::front_cache_reserve_headroom, growing first: while reserved is within this "
                        "fraction over peak live, a thread's front cache may keep the large blocks it freed since its "
                        "peak (0: off)",
                    1e3);
  add_number_option(app, "--front-cache-peak-fraction", opts.front_cache_peak_fraction,
                    std::string(what) +
                        ": pool_options::front_cache_peak_fraction, large blocks a thread's front cache may keep, as a "
                        "fraction of its peak live bytes (default policy; 0, the default: front_cache_bytes alone)",
                    1e3);
  app.add_flag("--reclaim-own-first", opts.reclaim_own_first,
               std::string(what) +
                   ": pool_options::reclaim_own_first, a large request tries mapped memory and the caller's own "
                   "cached blocks before remapping idle granules (default policy)");
  app.add_flag("--wait-before-grow", opts.wait_before_grow,
               std::string(what) +
                   ": pool_options::wait_before_grow, host-wait for pending frees before growing (default "
                   "policy)");
  app.add_flag("--stream-ordered-moves,!--no-stream-ordered-moves", opts.stream_ordered_moves,
               std::string(what) +
                   ": pool_options::stream_ordered_moves, a request on a stream may take memory that stream "
                   "freed while its work is still queued, mapped a second time (virtual upstreams)");
  app.add_flag("--front-cache,!--no-front-cache", opts.front_cache,
               std::string(what) +
                   ": pool_options::front_cache, per-thread caches of freed blocks in front of the pool's lock "
                   "(on by default; off, every request takes the pool's lock)");
  add_number_option(app, "--remap-time-budget", opts.remap_time_budget,
                    std::string(what) +
                        ": pool_options::remap_time_budget, the most host time spent moving idle granules, as a "
                        "fraction of wall time (0, the default: no bound); past it the pool grows instead",
                    1.0);
  app.add_option_function<double>(
         "--remap-cost-us",
         [&opts](double us) { opts.remap_cost_ns_per_granule = us * 1e3; },
         std::string(what) +
             ": pool_options::remap_cost_ns_per_granule in µs, the least a granule moved is charged against "
             "--remap-time-budget (the simulated device's calls cost nothing; the H200's cost ~36)")
      ->check(CLI::Range(0.0, 1e9));
  add_byte_size_option(app, "--max-handle-bytes", opts.max_handle_bytes,
                       std::string(what) +
                           ": pool_options::max_handle_bytes, the largest physical handle the pool creates when it "
                           "grows (e.g. 32M; 0, the default, picks by policy: one granule per handle, 32 MiB with "
                           "--grow-before-reclaim)");
  add_byte_size_option(app, "--initial-reserve", opts.initial_reserve_bytes,
                       std::string(what) +
                           ": pool_options::initial_reserve_bytes, what the pool reserves (maps) when it is made, "
                           "as a pool sized for its job (e.g. 1G; 0, the default: it grows as requests come)");
  add_byte_size_option(app, "--front-cache-bytes", opts.front_cache_bytes,
                       std::string(what) +
                           ": pool_options::front_cache_bytes, what each thread's front cache keeps per stream of small blocks, and apart of large ones (e.g. "
                           "4M; default 32M)");
}

}  // namespace gpumem::tools
