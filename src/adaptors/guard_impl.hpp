#pragma once
// The guard's bookkeeping: what is live, what was freed (quarantined or already given back), and
// the operations guard.cpp and guard_report.cpp share. Internal to src/adaptors.
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "call_stack.hpp"
#include "gpumem/errors.hpp"
#include "gpumem/guard.hpp"

namespace gpumem {

struct guard::impl {
  struct live_block {
    std::size_t bytes = 0;           // what the caller asked for
    std::size_t alignment = 0;
    std::size_t upstream_bytes = 0;  // bytes + canary: what the upstream was asked for
    stream_ref stream = {};
    detail::call_stack allocated_at;
  };
  struct freed_block {
    live_block was;
    stream_ref freed_on = {};
    detail::call_stack freed_at;
    std::uint64_t serial = 0;   // tells a history entry from a newer free of the same address
    bool quarantined = false;   // still held (poisoned) by the guard, not yet given back upstream
  };
  struct queued { std::uintptr_t address; std::uint64_t serial; };

  impl(std::unique_ptr<detail::guarded_upstream> up, guard_options o);

  std::unique_ptr<detail::guarded_upstream> upstream;
  guard_options opts;
  memory_access* access;

  mutable std::mutex mutex;  // one lock over everything, upstream calls included: a debug tool
  std::map<std::uintptr_t, live_block> live;
  std::map<std::uintptr_t, freed_block> freed;
  std::deque<queued> quarantine;  // oldest first
  std::deque<queued> history;     // freed blocks given back upstream, oldest first
  std::size_t live_bytes = 0;
  std::size_t quarantined_bytes = 0;
  std::uint64_t next_serial = 1;

  // --- guard.cpp (all called with `mutex` held) ---
  void forget_freed_overlapping(std::uintptr_t begin, std::size_t bytes);
  // Gives back the oldest quarantined blocks until at most `budget` bytes remain, checking each
  // one's poison first. Returns how many were found changed.
  std::size_t evict_quarantine(std::size_t budget) noexcept;
  // Reads a quarantined block back and reports it if any byte lost its poison. True if changed.
  bool check_one_poison(std::uintptr_t address, const freed_block& f) noexcept;
  void trim_history() noexcept;

  // --- guard_report.cpp: one report_misuse call each ---
  void report_unmatched_free(void* p, std::size_t bytes, std::size_t alignment, stream_ref s,
                             const detail::call_stack& here) const noexcept;
  void report_mismatch(void* p, std::size_t bytes, std::size_t alignment, const live_block& b,
                       const detail::call_stack& here) const noexcept;
  void report_overrun(void* p, const live_block& b, std::size_t first_changed_offset,
                      std::size_t changed, unsigned char found,
                      const detail::call_stack& here) const noexcept;
  void report_write_after_free(std::uintptr_t address, const freed_block& f,
                               std::size_t first_changed_offset, std::size_t changed,
                               unsigned char found) const noexcept;
  std::string leak_text() const;
  std::string pinned_line() const;
};

// Small formatting helpers shared by the report and the leak text.
namespace detail {
std::string stream_name(stream_ref s);
std::string stack_text(const call_stack& s);
}  // namespace detail

}  // namespace gpumem
