#pragma once
// A replay target that forwards everything to a real one: tests derive from it and break one call
// on purpose (hand out overlapping blocks, scribble over a live block) to prove the soak's
// integrity checks catch it.
#include <cstdint>
#include <functional>
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

// Every `period`-th allocation first overwrites the block handed out just before it (stamped by then,
// still live) through `scribble`, as memory handed out under a live block would be written: the
// data check must count it. CPU and GPU tests differ only in how they write (memset, cudaMemsetAsync).
struct scribbling_replay_target : wrapped_replay_target {
  using scribble_fn = std::function<void(void* block, std::size_t bytes, stream_ref allocated_on)>;
  scribbling_replay_target(std::unique_ptr<replay_target> wrapped, std::uint64_t every, scribble_fn write)
      : wrapped_replay_target(std::move(wrapped)), period(every), scribble(std::move(write)) {}
  void* allocate(std::size_t bytes, stream_ref s) override {
    if (++count % period == 0 && last && last_bytes >= 4) scribble(last, last_bytes, last_stream);
    void* p = inner->allocate(bytes, s);
    last = p;
    last_bytes = bytes;
    last_stream = s;
    return p;
  }
  void deallocate(void* p, std::size_t bytes, stream_ref s) override {
    if (p == last) last = nullptr;
    inner->deallocate(p, bytes, s);
  }

  std::uint64_t period;
  scribble_fn scribble;
  std::uint64_t count = 0;
  void* last = nullptr;
  std::size_t last_bytes = 0;
  stream_ref last_stream = {};
};

// The target `replay` makes for `resource`, with the rest of `base`.
inline std::unique_ptr<replay_target> make_inner_target(const std::string& resource, replay_options base = {}) {
  base.resource = resource;
  return make_replay_target(base);
}

}  // namespace gpumem::testing_support
