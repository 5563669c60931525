#pragma once
// The data half of a soak's integrity check (`gpumem replay --verify-every K`): every K-th block a
// replay hands out is stamped with a pattern derived from a tag right after allocation, and checked
// just before it is freed. Memory remapped, or handed to someone else while the block was live,
// then shows as words that no longer hold the pattern.
//
// Each target says how its memory is stamped (replay_target::make_verifier): kernels on the GPU,
// plain writes for host memory, and a shadow model for the simulated device, whose addresses are
// never backed by memory.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

#include "gpumem/core.hpp"

namespace gpumem {

struct replay_verifier {
  virtual ~replay_verifier() = default;
  // Writes tag's pattern over the whole words of [p, p + bytes), ordered on `s`: the stream the
  // block was just allocated on.
  virtual void stamp(void* p, std::size_t bytes, std::uint64_t tag, stream_ref s) = 0;
  // Counts the whole words of [p, p + bytes) that no longer hold tag's pattern, ordered on `s` (the
  // stream the block is about to be freed on) after the work on `stamped_on`. May run
  // asynchronously; the count shows in mismatched_words().
  virtual void check(const void* p, std::size_t bytes, std::uint64_t tag, stream_ref stamped_on,
                     stream_ref s) = 0;
  // Words found different by every check so far; waits for checks still running.
  virtual std::uint64_t mismatched_words() = 0;
};

// A model of memory contents: which tag last stamped each byte. Never touches the addresses, so it
// works on any target. `mapped`, when given, is asked about each block at stamp and check: a block
// it calls unmapped counts all its words as mismatched.
std::unique_ptr<replay_verifier> make_shadow_verifier(
    std::function<bool(const void* p, std::size_t bytes)> mapped = nullptr);

// Writes and reads the pattern in host memory itself: for targets whose blocks the host can touch.
std::unique_ptr<replay_verifier> make_host_memory_verifier();

}  // namespace gpumem
