#pragma once
// A soak's integrity checks, called by the replay loop around each allocate and free
// (replay_options.check_integrity):
//   - every block handed out: overlap with any live block (live_block_index) and alignment;
//   - every verify_every-th allocation: stamped by the target's verifier after allocation and
//     checked before its free, on the block's streams; the verifier counts mismatched words.
// Problems are counted; the first few are described with pass, trace line, pointers and sizes.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "live_block_index.hpp"
#include "gpumem/replay.hpp"

namespace gpumem {

class replay_integrity {
 public:
  // What the loop keeps with each live block so its free undoes what its allocation did.
  struct ticket {
    std::uint64_t tag = 0;  // stamped with this tag; 0: not stamped
    // Its place in the overlap index; none for an overlapping block, which was left out.
    std::optional<live_block_index::handle> indexed;
  };

  // verify_every: stamp every k-th allocation (0: none, and `verifier` may be null). alignment: a
  // power of two (std::invalid_argument otherwise).
  replay_integrity(const trace& t, std::size_t verify_every, std::size_t alignment,
                   std::unique_ptr<replay_verifier> verifier);

  // The target handed out p (not null) for row `row` of pass `pass`, on stream s.
  ticket allocated(void* p, std::size_t bytes, stream_ref s, std::uint64_t row, std::size_t pass);
  // The loop is about to free p on s; it was allocated on `allocated_on`.
  void freeing(void* p, std::size_t bytes, ticket t, stream_ref allocated_on, stream_ref s);
  // At a pass end: reads the verifier's count (the GPU's waits for the pass's checks here).
  void pass_done(std::size_t pass);
  std::uint64_t mismatches() const noexcept { return overlaps_ + misaligned_ + mismatched_words_; }
  void report_into(replay_result& r) const;

 private:
  static constexpr std::size_t max_notes = 8;
  void note(std::string text);
  std::string where(std::uint64_t row, std::size_t pass) const;

  const trace& trace_;
  std::size_t verify_every_;
  std::uintptr_t alignment_mask_;  // alignment - 1 (a power of two)
  std::unique_ptr<replay_verifier> verifier_;
  live_block_index index_;
  std::size_t until_stamp_ = 0;  // allocations to go before the next stamp (a countdown: no division per op)
  std::uint64_t next_tag_ = 1;
  std::uint64_t overlap_checks_ = 0, overlaps_ = 0, misaligned_ = 0;
  std::uint64_t verified_blocks_ = 0, mismatched_words_ = 0;
  std::vector<std::string> notes_;
  std::uint64_t notes_dropped_ = 0;
};

}  // namespace gpumem
