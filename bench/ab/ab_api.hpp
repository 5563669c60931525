#pragma once
// What bench/ab's main sees of each gpumem build under test. Only standard types cross it, so each
// build's namespace (gpumem_vN) stays inside its own ab_variant.inc translation unit.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

namespace ab {

struct pattern {
  std::string kind;        // pair, churn or replay
  std::size_t size = 512;  // pair: the request's bytes
  std::string trace;       // replay: the trace file
  bool grow_first = true;  // pool_options::grow_before_reclaim
};

// A pool on its own simulated device, warmed up for one pattern.
class pattern_runner {
 public:
  virtual ~pattern_runner() = default;
  // Runs the pattern for about `ops` operations (a replay: one warm pass) and returns the host's
  // ns per operation.
  virtual double window(std::size_t ops) = 0;
};

extern volatile std::uintptr_t sink;  // keeps a pair from being proved dead

}  // namespace ab

// The builds under test, the first one the base every ratio is taken against: defined by
// scripts/ab_build.sh's generated ab_variants.cpp (several revisions), or by ab_self.cpp (this tree
// alone, the program tests/cli/ab.cmake builds and runs).
struct ab_variant_entry {
  const char* name;
  std::unique_ptr<ab::pattern_runner> (*make)(const ab::pattern&);
  // The build's gpumem::parse_byte_size ("512", "64K", "16M"; throws naming what is wrong): the
  // command line's sizes are read with the first build's.
  std::size_t (*parse_bytes)(std::string_view);
};
extern const ab_variant_entry ab_variants[];
extern const std::size_t ab_variant_count;
