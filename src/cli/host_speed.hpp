#pragma once
// How fast the host runs right now: a fixed piece of the pool's own work (the simulated device's
// 512 B alloc+free pair, the same instructions every time) timed for a short while. `gpumem
// bench` takes it before every pattern of every allocator and writes it beside the figures, so a
// run on a shared host says which figures it took while the host ran slow (some hosts switch
// between speeds far apart within seconds: a median of three runs is then one speed or the other).

namespace gpumem::tools {

// ns per simulated 512 B alloc+free pair: the fastest of a few short runs (the host's speed, not
// an interruption's).
double host_ns_per_sim_pair();

}  // namespace gpumem::tools
