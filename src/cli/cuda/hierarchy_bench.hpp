#pragma once
// Measures the memory hierarchy of the seed's model on the device: bandwidth of global, shared,
// register, local and constant memory, and the latency of a dependent load from global vs shared
// memory. Each figure is the median of `reps` timed runs (cudaEvent timing).
#include <string>
#include <vector>

namespace gpumem {

struct hierarchy_options {
  int device = 0;
  int reps = 7;
};

struct hierarchy_figure {
  std::string level;        // "global", "shared", "registers", "local", "constant_broadcast", ...
  std::string what;         // what was measured, in words
  double bytes_per_s = 0;   // bandwidth levels; 0 for latency figures
  double ns_per_access = 0; // latency figures; 0 for bandwidth ones
  double median_ms = 0;     // the median kernel time
};

struct hierarchy_result {
  std::string device_name;
  std::vector<hierarchy_figure> figures;
  double shared_over_global_bandwidth = 0;
  double global_over_shared_latency = 0;
};

// Throws cuda_error on failure.
hierarchy_result measure_hierarchy(const hierarchy_options& opts = {});

}  // namespace gpumem
