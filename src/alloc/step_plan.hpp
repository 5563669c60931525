#pragma once
// The step plan: a layout learned from one step of a job that repeats itself, so that the steps
// after it stop moving memory.
//
// A training step, a decode step or a server's batch asks for the same large blocks in the same
// order each time. Placed online by best fit, the tight arena keeps moving granules to stay within
// its reserve ceiling — the same moves every step. The plan watches the large requests the arena
// serves (recording); when the first `match_len` requests come again in order, it takes what it
// saw before them as one step and lays that step out once, as a compiler's memory planner would:
// every block at an offset in one region, no two blocks that are live at the same time (the
// step's end wrapping to its start) overlapping. The pool takes the region from the arena (one
// block, mapped once) if the layout is within the reserve ceiling, and from then on each large
// request that matches the plan's next entry lands at its offset: no tree search, no granule
// mapped, under the calling thread's front-cache lock only (following).
//
// The plan is advice, never trusted for safety: a block is placed only where no planned block is
// live now (the live set below), so a request out of order, a block freed late, or a step that
// changed shape misses: it takes the lowest place in the region no planned block holds now, or
// the arena's where none fits. When more than a quarter of a step's requests miss, the
// plan is dropped: blocks placed in it stay until freed, and the region goes back to the arena
// when the last one does (draining); recording starts again.
//
// A kept stretch's layout (stretch_library.hpp) is followed the same way, once: the plan takes it
// up at the stretch's first request and drops after its last, recording all the while.
//
// Streams: a plan is laid out for one stream (its first request's); the region's memory passes
// from one block to the next without events because both run on that stream, in order. A planned
// block freed on another stream, or used on one (record_use), keeps its place taken until the
// plan drains, and the region goes back as freed on those streams too.
//
// Not thread-safe: the pool calls it with the owning front cache's lock held (placing, releasing)
// and its own lock as well (recording, laying out, installing, dropping).
#include <cstddef>
#include <array>
#include <cstdint>
#include <unordered_map>
#include <vector>

#include "gpumem/core.hpp"
#include "step_layout.hpp"

namespace gpumem::detail {

class step_plan {
 public:
  enum class phase : std::uint8_t { recording, laid_out, following, draining };
  using entry = planned_entry;

  // Requests of the step's start that must come again, in order, before a step is taken as found.
  static constexpr std::size_t match_len = 16;
  // The fewest requests a step may have: shorter repeats (a pair, a layer) are the front caches'.
  static constexpr std::size_t min_step = 64;
  // Recorded requests after which a recording that found no step starts over.
  static constexpr std::size_t max_recorded = std::size_t{1} << 16;
  // How far past the expected entry a request may match (requests the program skipped).
  static constexpr std::uint32_t window = 8;

  phase state() const noexcept { return phase_; }
  bool following() const noexcept { return phase_ == phase::following; }

  // --- recording (under the pool's lock): large blocks the arena served and their frees. ------
  void record_alloc(std::uintptr_t a, std::size_t size, std::size_t alignment, stream_ref s);
  void record_free(std::uintptr_t a);
  // A whole step is recorded, and every block of it has been freed (or waited for long enough).
  bool step_ready() const noexcept { return phase_ == phase::recording && boundary_ != none && pending_ == 0; }
  // A hash of the step found: its requests and their lifetimes from its start. The same step
  // recorded again hashes the same, so a layout that did not fit need not be made again.
  std::uint64_t step_signature() const noexcept;
  std::size_t step_requests() const noexcept { return boundary_ == none ? 0 : boundary_; }
  // Forgets what was recorded and starts again from the next request.
  void restart();

  // Lays the recorded step out (best of three greedy orders). Returns the region's bytes; `peak`
  // gets the step's peak live bytes (of its planned blocks). The plan is then laid out: it waits
  // for the next step's start, when the blocks of the step in progress are gone, to take its
  // region (so the region does not sit beside them).
  std::size_t lay_out(std::size_t& peak);
  // Laid out: one more large request of the step in progress went to the arena.
  void count_alloc() noexcept { ++since_boundary_; }
  // Laid out: requests until the region is due (0: due now).
  std::size_t requests_to_install() const noexcept {
    const std::size_t n = entries_.size();
    return (install_at_ + n - since_boundary_ % n) % n;
  }
  // The next large request starts a step: the region should be taken now.
  bool install_due() const noexcept { return phase_ == phase::laid_out && requests_to_install() == 0; }
  // Starts following at `base`, a region of lay_out's bytes aligned to the granule.
  void install(std::uintptr_t base);
  // Recording (or laid out, waiting for the step's start), at a quiet moment: laid out with a kept
  // stretch's layout (stretch_library.hpp), due now, to be followed once: after its last request,
  // or at a quiet moment that is not its next, the plan drops and the region goes back. A step
  // laid out waits aside meanwhile, its requests still counted, and is laid out again then.
  void follow_once(const std::vector<entry>& entries, stream_ref s);
  // The stretch's region could not be taken: as before follow_once, with what was recorded kept.
  void unfollow();
  bool following_once() const noexcept { return once_; }
  // Requests are recorded: while no plan is laid out or followed, and through a stretch followed
  // once (a step the job repeats may span stretches).
  bool recording() const noexcept { return phase_ == phase::recording || once_; }

  // --- following (under the owning front cache's lock) -----------------------------------------
  // A place for a large block, or 0 (the caller goes to the arena).
  std::uintptr_t place(std::size_t size, std::size_t alignment, stream_ref s);
  // The planned block at `a` freed on `s`: its place is free again for the plan's stream — unless
  // `s` is another stream or the block was used on others (`also`): then the place stays taken and
  // the plan drops. True when the plan is draining and this was its last block.
  bool release(std::uintptr_t a, stream_ref s, const std::vector<stream_ref>& also = {});
  bool in_region(std::uintptr_t a) const noexcept { return a - base_ < extent_; }

  // Stops placing; the region goes back once no planned block is live (`drained`).
  void drop();
  bool drained() const noexcept { return phase_ == phase::draining && live_.size() == poisoned_; }
  std::uintptr_t region() const noexcept { return base_; }
  std::size_t region_bytes() const noexcept { return extent_; }
  // Laid out: the bytes its region needs.
  std::size_t extent_planned() const noexcept;
  stream_ref stream() const noexcept { return stream_; }
  // Streams other than the plan's that used planned blocks: the region goes back freed on them too.
  const std::vector<stream_ref>& other_streams() const noexcept { return others_; }
  // After the region went back: recording again.
  void region_returned();

  // Figures for reports and tests.
  std::uint64_t hits() const noexcept { return hits_; }
  std::uint64_t misses() const noexcept { return misses_; }
  std::uint64_t plans_made() const noexcept { return plans_; }
  std::size_t entries() const noexcept { return entries_.size(); }
  std::size_t live_blocks() const noexcept { return live_.size(); }
  std::size_t poisoned_places() const noexcept { return poisoned_; }
  // Throws std::logic_error when the live set overlaps itself or leaves the region.
  void check() const;

 private:
  static constexpr std::uint32_t none = UINT32_MAX;
  struct recorded {
    std::size_t size;
    std::uint8_t align_log2;
    stream_ref stream;
    std::uint64_t start, end;  // ticks; end UINT64_MAX: still live
  };
  struct placed {
    std::size_t offset, end;
    bool poisoned;
  };
  bool same(const recorded& x, const recorded& y) const noexcept {
    return x.size == y.size && x.align_log2 == y.align_log2 && x.stream == y.stream;
  }
  void step_found(std::size_t boundary);
  void forget_recording();
  void stop_waiting_after_a_step() noexcept;
  void miss();
  // After a stretch followed once: the step laid out before it waits for its start again, if any.
  void resume_waiting_step();
  std::uintptr_t place_entry(const entry& e, std::size_t size, std::size_t alignment, stream_ref s);
  // A request the plan did not expect, on the plan's stream: the lowest place in the region no
  // planned block holds now, or 0.
  std::uintptr_t place_in_gap(std::size_t size, std::size_t alignment, stream_ref s);

  phase phase_ = phase::recording;
  // Recording.
  std::vector<recorded> rec_;
  std::unordered_map<std::uintptr_t, std::uint32_t> rec_live_;
  std::uint64_t tick_ = 0;
  std::size_t matched_ = 0;        // the newest requests that repeat the recording's first ones
  std::array<std::uint8_t, match_len> fail_{};  // KMP failure function of those first ones
  std::size_t boundary_ = none;    // the step: rec_[0, boundary_)
  std::uint64_t boundary_tick_ = 0;
  std::size_t since_boundary_ = 0;  // requests of the steps after the one recorded
  std::size_t install_at_ = 0;     // laid out: the entry before which the region is taken
  std::size_t pending_ = 0;        // blocks of the step still live
  // Following.
  std::vector<entry> entries_;
  std::uintptr_t base_ = 0;
  std::size_t extent_ = 0;
  stream_ref stream_{};
  std::uint32_t next_ = 0;             // the entry expected next
  bool once_ = false;                  // a stretch's layout, followed once
  std::vector<entry> waiting_;         // the step laid out before it (follow_once), or empty
  stream_ref waiting_stream_{};
  std::uint32_t round_misses_ = 0;     // misses since the plan last came round
  std::uint32_t streak_ = 0;           // misses since the last hit
  std::vector<placed> live_;           // planned blocks live now, by offset
  std::size_t poisoned_ = 0;           // of them, used on other streams: kept until the plan drains
  std::vector<stream_ref> others_;
  std::uint64_t hits_ = 0, misses_ = 0, plans_ = 0;
};

}  // namespace gpumem::detail
