#pragma once
// The timed loop of every replay over a replay_plan: gpumem::replay (when no per-row feature is
// on), `gpumem bench` for every allocator it compares, and bench/allocator_patterns. One loop, so
// gpumem and its peers pay the same harness per op: an op read from an array, the allocator's
// call, a slot written. Everything else (the plan, the allocator's streams, freeing what a pass
// leaves live) happens outside it, where no clock runs.
//
// `Allocator` needs two members, called directly (a template, not a virtual interface, so the loop
// adds no call of its own):
//   void* alloc(std::size_t bytes, stream_ref s);  // nullptr, or a throw: could not
//   void free(void* p, std::size_t bytes, stream_ref s);  // bytes: what alloc was given
// A free goes to the stream of the trace's free row; what free_live gives back goes to the stream
// it was allocated on.
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <utility>
#include <vector>

#include "gpumem/core.hpp"
#include "gpumem/detail/replay_plan.hpp"

namespace gpumem {

template <class Allocator>
class replay_loop {
 public:
  // `streams[i]`: the allocator's stream for plan.streams[i], made by the caller before any clock
  // starts. The loop keeps its own copy of the plan's ops, with those streams in place of indices.
  replay_loop(Allocator& a, const replay_plan& plan, const std::vector<stream_ref>& streams);

  // Replays the plan's ops [first, last): what a clock times. A throw from the allocator leaves
  // every block it handed out where free_live finds it.
  void run(std::size_t first, std::size_t last);
  void run() { run(0, ops_.size()); }

  // Frees every block still live (what a pass of the trace leaves live, or what a throw left) in
  // slot order, each on the stream it was allocated on, so the next pass starts from empty slots.
  // Outside the clock.
  void free_live();

  // Requests of one byte or more that came back nullptr, over every run (but one that threw).
  std::uint64_t failed_allocs() const noexcept { return failed_; }

 private:
  // A plan op with the allocator's stream in place of the plan's index: one load less per op, and
  // one register less in a loop whose values must all survive the allocator's calls.
  struct op {
    std::uint64_t size;
    stream_ref stream;
    std::uint32_t slot;
    bool alloc;
  };
  struct live_block {
    void* ptr = nullptr;
    const op* from = nullptr;  // the op that allocated it: free_live's size and stream
  };
  Allocator& a_;
  std::vector<op> ops_;
  std::vector<live_block> live_;
  std::uint64_t failed_ = 0;
};

template <class Allocator>
replay_loop<Allocator>::replay_loop(Allocator& a, const replay_plan& plan, const std::vector<stream_ref>& streams)
    : a_(a), live_(plan.slots) {
  if (streams.size() != plan.streams.size())
    throw std::invalid_argument("replay_loop: one stream per stream of the plan is needed");
  ops_.reserve(plan.ops.size());
  for (const replay_plan::op& o : plan.ops) ops_.push_back({o.size, streams[o.stream], o.slot, o.alloc});
}

// Out of line (noinline): inlined into a large caller (gpumem::replay) the loop's values spill to
// the stack around every call; on its own they all stay in the registers a call preserves.
template <class Allocator>
[[gnu::noinline]] void replay_loop<Allocator>::run(std::size_t first, std::size_t last) {
  // Locals rather than members: the allocator's calls are opaque to the compiler, which would
  // otherwise reload every member after each one.
  Allocator& a = a_;
  live_block* const live = live_.data();
  std::uint64_t failed = failed_;
  for (const op *o = ops_.data() + first, *const end = ops_.data() + last; o != end; ++o) {
    live_block& b = live[o->slot];
    if (o->alloc) {
      void* p = a.alloc(o->size, o->stream);
      b = {p, o};
      failed += p == nullptr && o->size != 0;
    } else {
      // Emptied before the call: a free that throws leaves nothing to free twice.
      if (void* p = std::exchange(b.ptr, nullptr)) a.free(p, o->size, o->stream);
    }
  }
  failed_ = failed;
}

template <class Allocator>
void replay_loop<Allocator>::free_live() {
  for (live_block& b : live_)
    if (void* p = std::exchange(b.ptr, nullptr)) a_.free(p, b.from->size, b.from->stream);
}

}  // namespace gpumem
