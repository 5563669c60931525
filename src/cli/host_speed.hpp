#pragma once
// How fast the host runs right now: a fixed piece of the pool's own work (the simulated device's
// 512 B alloc+free pair, the same instructions every time) timed for a short while. `gpumem
// bench` takes it before every pattern of every allocator and writes it beside the figures, so a
// run on a shared host says which figures it took while the host ran slow. (Session 21's H200 host
// switched between two speeds ~1.8x apart within seconds: a median of three runs was then one
// speed or the other, or between.) `gpumem replay --host-probe` takes it after every pass of a
// soak, where a host's slow phase of ~10 ms would otherwise pass for a slow pass.
#include <memory>

namespace gpumem::tools {

// A simulated device and a pool on it, kept warm (front cache and slab set up), whose pair is
// timed on demand on the calling thread.
class host_probe {
 public:
  host_probe();
  ~host_probe();
  host_probe(const host_probe&) = delete;
  host_probe& operator=(const host_probe&) = delete;
  // ns per pair over `pairs` pairs, timed once: the host's speed at this moment, slow or not.
  double ns_per_pair(int pairs);

 private:
  struct state;
  std::unique_ptr<state> s_;
};

// ns per simulated 512 B alloc+free pair: the fastest of a few short runs (the host's speed, not
// an interruption's).
double host_ns_per_sim_pair();

}  // namespace gpumem::tools
