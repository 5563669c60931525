#pragma once
// The figures of a pinned host allocation trace (what trace_adaptor writes around
// pinned_host_resource), gathered for the doctor's pinned-memory finding. Kept apart from the
// judging (doctor_pinned.cpp) so the arithmetic is tested on its own terms.
#include <cstdint>

#include "gpumem/trace.hpp"

namespace gpumem::detail {

struct pinned_profile {
  std::uint64_t rows = 0;
  std::uint64_t allocations = 0;
  std::uint64_t failures = 0;                   // `allocate failure` rows: the resource refused
  std::uint64_t peak_bytes = 0;                 // peak pinned live bytes
  std::uint64_t peak_line = 0;
  std::uint64_t largest_allocation_bytes = 0;
  // Allocations of a size that an earlier pinned block, already freed, had: the program unpinned a
  // buffer and pinned one of the same size again instead of keeping it. Each free is matched by at
  // most one later allocation.
  std::uint64_t repinned_allocations = 0;
  bool timed = false;                           // every row has a time
  double duration_seconds = 0.0;                // first to last row
};

pinned_profile profile_pinned(const trace& t);

}  // namespace gpumem::detail
