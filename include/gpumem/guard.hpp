#pragma once
// gpumem::guard — a debug adaptor over any gpumem::resource. It checks, at a cost, what a pool's
// own cheap checks cannot:
//   - double free (naming where the block was allocated and where it was first freed);
//   - free of a pointer it never handed out, including an interior pointer into a live block;
//   - free with another size or alignment than the allocation's;
//   - writes past a block's end: `canary_bytes` bytes after the caller's bytes are filled with
//     `canary_byte` at allocate and checked at free;
//   - use after free: a freed block is filled with `poison_byte` and kept in a quarantine (not
//     given back upstream, so nobody else may legitimately write it). When it leaves the quarantine
//     (at a later allocate, once the quarantine is over budget), at `check_poison()`, or when the
//     guard is destroyed, a changed byte is reported as a write after free;
//   - leaks: at destruction (or `report_leaks()`), every live allocation with its size, stream and
//     the call stack that allocated it.
// Every misuse is ONE report through gpumem::report_misuse (errors.hpp): the default handler prints
// and aborts; a test installs its own.
//
// Cost: each allocation asks upstream for `canary_bytes` more, captures a call stack (backtrace,
// symbolized only when printed) and writes the canary; each free reads the canary back and writes
// the poison (on device memory: a cudaMemcpyAsync + stream synchronize, and a cudaMemsetAsync).
// Quarantined blocks hold up to `quarantine_bytes` of upstream memory. Thread safe (one mutex).
//
// Bytes are touched only through a `memory_access` (memory_access.hpp): host memory by default,
// `device_memory_access()` for CUDA device memory.
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "gpumem/core.hpp"
#include "gpumem/memory_access.hpp"
#include "gpumem/resource.hpp"

namespace gpumem {

struct guard_options {
  // How the guard reads and writes the memory the upstream hands out. Not owned; must outlive the
  // guard. nullptr means host_memory_access().
  memory_access* access = nullptr;
  // Bytes after each allocation filled with `canary_byte`; 0 turns overrun detection off.
  std::size_t canary_bytes = 32;
  unsigned char canary_byte = 0xCB;
  // Freed blocks are filled with `poison_byte` and quarantined; false gives them back at once
  // (no use-after-free detection, no quarantine memory).
  bool poison_freed = true;
  unsigned char poison_byte = 0xDD;
  // Most upstream bytes kept in quarantine; past it the oldest blocks are checked and given back
  // at the next allocate. 0 keeps none beyond that next allocate.
  std::size_t quarantine_bytes = std::size_t{64} << 20;
  // Freed addresses remembered (after they left the quarantine) to name a double free's first free.
  std::size_t freed_history = 1 << 16;
  // Frames kept for each allocation's and free's call stack (at most 32).
  std::size_t stack_depth = 16;
  // The destructor reports live allocations as one `leak` misuse.
  bool report_leaks_at_destruction = true;
  // When set, every report also states the process's pinned host memory: {total bytes, cap bytes}
  // (pinned_host_resource provides it). Pinned memory is page-locked RAM the OS cannot swap, so a
  // leak of it starves the whole machine, not only this process.
  std::function<std::pair<std::size_t, std::size_t>()> pinned_host_usage;
};

// One live allocation, as the guard recorded it.
struct guarded_allocation {
  const void* pointer = nullptr;
  std::size_t bytes = 0;
  std::size_t alignment = 0;
  stream_ref stream = {};
  std::string allocated_at;   // the call stack, symbolized, one frame a line
};

namespace detail {
// The upstream, type-erased so the checking code is compiled once, in src/adaptors/guard.cpp.
class guarded_upstream {
 public:
  virtual ~guarded_upstream() = default;
  virtual void* allocate(std::size_t bytes, std::size_t alignment, stream_ref s) = 0;
  virtual void deallocate(void* p, std::size_t bytes, std::size_t alignment,
                          stream_ref s) noexcept = 0;
};

template <resource R>
class guarded_upstream_of final : public guarded_upstream {
 public:
  explicit guarded_upstream_of(R& r) noexcept : r_(&r) {}
  void* allocate(std::size_t bytes, std::size_t alignment, stream_ref s) override {
    return r_->allocate(bytes, alignment, s);
  }
  void deallocate(void* p, std::size_t bytes, std::size_t alignment,
                  stream_ref s) noexcept override {
    r_->deallocate(p, bytes, alignment, s);
  }

 private:
  R* r_;
};
}  // namespace detail

class guard {
 public:
  // `upstream` is not owned and must outlive the guard.
  template <resource R>
  explicit guard(R& upstream, guard_options opts = {})
      : guard(std::make_unique<detail::guarded_upstream_of<R>>(upstream), std::move(opts)) {}
  // Reports leaks (when asked to), checks and gives back every quarantined block. Live blocks are
  // left with the upstream: their owners may still use them.
  ~guard();
  guard(const guard&) = delete;
  guard& operator=(const guard&) = delete;

  // Throws std::invalid_argument for an alignment that is not a power of two, or a size that
  // overflows with the canary; otherwise what the upstream throws. A size of 0 returns nullptr.
  void* allocate(std::size_t bytes, std::size_t alignment = default_alignment, stream_ref s = {});
  // Checks, then poisons and quarantines the block. Misuse goes to the misuse handler; if the
  // handler returns: a wrong size or alignment is corrected from the record and the block freed;
  // an unknown pointer or a double free is ignored (never forwarded upstream). nullptr is ignored.
  void deallocate(void* p, std::size_t bytes, std::size_t alignment = default_alignment,
                  stream_ref s = {}) noexcept;

  // Checks every quarantined block's poison now; reports each changed block. Returns how many.
  std::size_t check_poison();
  // Reports every live allocation as one `leak` misuse (if any). Returns how many are live.
  std::size_t report_leaks();
  // The text report_leaks() would send (empty when nothing is live), without reporting.
  std::string leak_report() const;
  std::vector<guarded_allocation> live() const;
  std::size_t live_bytes() const;
  std::size_t quarantined_bytes() const;   // upstream bytes held in quarantine

  bool operator==(const guard& o) const noexcept { return this == &o; }

  struct impl;

 private:
  guard(std::unique_ptr<detail::guarded_upstream> up, guard_options opts);
  std::unique_ptr<impl> impl_;
};

static_assert(resource<guard>);

}  // namespace gpumem
