#include "replay_integrity.hpp"

#include <fmt/format.h>

#include <stdexcept>
#include <utility>

namespace gpumem {

replay_integrity::replay_integrity(const trace& t, std::size_t verify_every, std::size_t alignment,
                                   std::unique_ptr<replay_verifier> verifier)
    : trace_(t),
      verify_every_(verify_every),
      alignment_mask_(alignment - 1),
      verifier_(std::move(verifier)) {
  if (!is_power_of_two(alignment))
    throw std::invalid_argument(fmt::format("integrity alignment {} is not a power of two", alignment));
}

std::string replay_integrity::where(std::uint64_t row, std::size_t pass) const {
  if (row < trace_.lines.size()) return fmt::format("pass {} line {}", pass + 1, trace_.lines[row]);
  return fmt::format("pass {} row {}", pass + 1, row);
}

void replay_integrity::note(std::string text) {
  if (notes_.size() < max_notes)
    notes_.push_back(std::move(text));
  else
    ++notes_dropped_;
}

replay_integrity::ticket replay_integrity::allocated(void* p, std::size_t bytes, stream_ref s, std::uint64_t row,
                                                     std::size_t pass) {
  ticket t;
  const auto addr = reinterpret_cast<std::uintptr_t>(p);
  if (addr & alignment_mask_) {
    ++misaligned_;
    note(fmt::format("{}: block {:#x} ({} B) is not aligned to {} B", where(row, pass), addr, bytes,
                     alignment_mask_ + 1));
  }
  if (bytes) {
    ++overlap_checks_;
    live_block_index::block other;
    t.indexed = index_.insert(addr, bytes, {row, pass}, &other);
    if (!t.indexed) {
      ++overlaps_;
      note(fmt::format("{}: block {:#x} ({} B) overlaps live block {:#x} ({} B) allocated at {}", where(row, pass),
                       addr, bytes, other.addr, other.bytes, where(other.from.row, other.from.pass)));
    }
  }
  if (verify_every_ && until_stamp_-- == 0) {  // the 1st, (k+1)-th, (2k+1)-th ... allocation
    until_stamp_ = verify_every_ - 1;
    t.tag = next_tag_++;
    verifier_->stamp(p, bytes, t.tag, s);
  }
  return t;
}

void replay_integrity::freeing(void* p, std::size_t bytes, ticket t, stream_ref allocated_on, stream_ref s) {
  if (t.indexed) index_.erase(*t.indexed);
  if (t.tag) {
    verifier_->check(p, bytes, t.tag, allocated_on, s);
    ++verified_blocks_;
  }
}

void replay_integrity::pass_done(std::size_t pass) {
  if (!verify_every_) return;
  const std::uint64_t words = verifier_->mismatched_words();
  if (words > mismatched_words_)
    note(fmt::format("pass {}: {} words of verified blocks no longer held their pattern at free", pass + 1,
                     words - mismatched_words_));
  mismatched_words_ = words;
}

void replay_integrity::report_into(replay_result& r) const {
  r.integrity_checked = true;
  r.verify_every = verify_every_;
  r.overlap_checks = overlap_checks_;
  r.overlaps = overlaps_;
  r.misaligned = misaligned_;
  r.verified_blocks = verified_blocks_;
  r.mismatched_words = mismatched_words_;
  r.integrity_notes = notes_;
  if (notes_dropped_) r.integrity_notes.push_back(fmt::format("... and {} more", notes_dropped_));
}

}  // namespace gpumem
