#pragma once
// A replay target that forwards everything to a real one: tests derive from it and break one call
// on purpose (hand out overlapping blocks, scribble over a live block) to prove the soak's
// integrity checks catch it.
#include <memory>
#include <utility>

#include "gpumem/replay.hpp"

namespace gpumem::testing_support {

struct wrapped_replay_target : replay_target {
  explicit wrapped_replay_target(std::unique_ptr<replay_target> wrapped) : inner(std::move(wrapped)) {}
  void* allocate(std::size_t bytes, stream_ref s) override { return inner->allocate(bytes, s); }
  void deallocate(void* p, std::size_t bytes, stream_ref s) override { inner->deallocate(p, bytes, s); }
  stream_ref stream_for(std::uint64_t trace_stream) override { return inner->stream_for(trace_stream); }
  std::size_t reserved() override { return inner->reserved(); }
  std::size_t peak_reserved() override { return inner->peak_reserved(); }
  pool_stats stats() override { return inner->stats(); }
  std::vector<block_info> blocks() override { return inner->blocks(); }
  std::size_t alignment() override { return inner->alignment(); }
  std::unique_ptr<replay_verifier> make_verifier() override { return inner->make_verifier(); }

  std::unique_ptr<replay_target> inner;
};

// The target `replay` makes for `resource`, with the rest of `base`.
inline std::unique_ptr<replay_target> make_inner_target(const std::string& resource, replay_options base = {}) {
  base.resource = resource;
  return make_replay_target(base);
}

}  // namespace gpumem::testing_support
