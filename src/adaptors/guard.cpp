// gpumem::guard: the checks at allocate and deallocate, the quarantine, and the freed history.
// Message wording lives in guard_report.cpp.
#include <algorithm>
#include <cstdio>
#include <exception>
#include <limits>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

#include "guard_impl.hpp"

namespace gpumem {

namespace {
// Frames left out of captured stacks besides capture_call_stack itself: guard::allocate or
// guard::deallocate, so the first frame kept is the caller's own call site.
constexpr std::size_t guard_frames = 1;

std::uintptr_t address_of(const void* p) noexcept { return reinterpret_cast<std::uintptr_t>(p); }
void* pointer_at(std::uintptr_t a) noexcept { return reinterpret_cast<void*>(a); }

// A memory_access may throw (cuda_error); deallocate and the destructor cannot. Say so on stderr
// rather than lose it: the check that needed the bytes did not happen.
void note_access_failure(const char* what_for, const void* p) noexcept {
  try {
    throw;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gpumem::guard: could not %s at %p: %s\n", what_for, p, e.what());
  } catch (...) {
    std::fprintf(stderr, "gpumem::guard: could not %s at %p: unknown exception\n", what_for, p);
  }
}
}  // namespace

guard::impl::impl(std::unique_ptr<detail::guarded_upstream> up, guard_options o)
    : upstream(std::move(up)),
      opts(std::move(o)),
      access(opts.access ? opts.access : &host_memory_access()) {
  opts.stack_depth = std::min(opts.stack_depth, detail::call_stack::max_frames);
}

guard::guard(std::unique_ptr<detail::guarded_upstream> up, guard_options opts)
    : impl_(std::make_unique<impl>(std::move(up), std::move(opts))) {}

guard::~guard() {
  if (impl_->opts.report_leaks_at_destruction) report_leaks();
  std::lock_guard lock(impl_->mutex);
  impl_->evict_quarantine(0);
}

void* guard::allocate(std::size_t bytes, std::size_t alignment, stream_ref s) {
  if (!is_power_of_two(alignment)) {
    throw std::invalid_argument("gpumem::guard::allocate: alignment " + std::to_string(alignment) +
                                " is not a power of two (request of " + std::to_string(bytes) +
                                " bytes)");
  }
  if (bytes == 0) return nullptr;
  impl& m = *impl_;
  if (bytes > std::numeric_limits<std::size_t>::max() - m.opts.canary_bytes) {
    throw std::invalid_argument("gpumem::guard::allocate: " + std::to_string(bytes) +
                                " bytes plus the " + std::to_string(m.opts.canary_bytes) +
                                "-byte canary overflows size_t");
  }
  const std::size_t upstream_bytes = bytes + m.opts.canary_bytes;
  const detail::call_stack here = detail::capture_call_stack(guard_frames, m.opts.stack_depth);

  std::lock_guard lock(m.mutex);
  // A later allocate is where quarantined blocks are checked and given back once over budget.
  m.evict_quarantine(m.opts.quarantine_bytes);
  void* p = nullptr;
  try {
    p = m.upstream->allocate(upstream_bytes, alignment, s);
  } catch (const std::bad_alloc&) {
    if (m.quarantine.empty()) throw;
    // The quarantine may be what is missing: give it all back and try once more.
    m.evict_quarantine(0);
    p = m.upstream->allocate(upstream_bytes, alignment, s);
  }
  if (p == nullptr) return nullptr;

  const std::uintptr_t a = address_of(p);
  // The upstream may hand out (part of) an address freed earlier: that old record no longer says
  // anything about this memory.
  m.forget_freed_overlapping(a, upstream_bytes);
  try {
    m.access->fill(static_cast<unsigned char*>(p) + bytes, m.opts.canary_byte, m.opts.canary_bytes,
                   s);
  } catch (...) {
    m.upstream->deallocate(p, upstream_bytes, alignment, s);
    throw;
  }
  m.live[a] = impl::live_block{bytes, alignment, upstream_bytes, s, here};
  m.live_bytes += bytes;
  return p;
}

void guard::deallocate(void* p, std::size_t bytes, std::size_t alignment, stream_ref s) noexcept {
  if (p == nullptr) return;
  impl& m = *impl_;
  const detail::call_stack here = detail::capture_call_stack(guard_frames, m.opts.stack_depth);

  std::lock_guard lock(m.mutex);
  const auto it = m.live.find(address_of(p));
  if (it == m.live.end()) {
    // Never forwarded: the upstream would corrupt its own books with it.
    m.report_unmatched_free(p, bytes, alignment, s, here);
    return;
  }
  impl::live_block block = it->second;
  if (bytes != block.bytes || alignment != block.alignment) {
    // Carry on with the recorded figures so the upstream gets back exactly what it gave.
    m.report_mismatch(p, bytes, alignment, block, here);
  }

  if (m.opts.canary_bytes != 0) {
    std::vector<unsigned char> canary(m.opts.canary_bytes);
    try {
      m.access->read(canary.data(), static_cast<unsigned char*>(p) + block.bytes, canary.size(), s);
      const auto first = std::find_if(canary.begin(), canary.end(),
                                      [&](unsigned char c) { return c != m.opts.canary_byte; });
      if (first != canary.end()) {
        const auto changed = static_cast<std::size_t>(std::count_if(
            first, canary.end(), [&](unsigned char c) { return c != m.opts.canary_byte; }));
        m.report_overrun(p, block, static_cast<std::size_t>(first - canary.begin()), changed,
                         *first, here);
      }
    } catch (...) {
      note_access_failure("read the canary", p);
    }
  }

  m.live.erase(it);
  m.live_bytes -= block.bytes;
  const std::uintptr_t a = address_of(p);
  impl::freed_block f{block, s, here, m.next_serial++, false};
  if (m.opts.poison_freed) {
    try {
      m.access->fill(p, m.opts.poison_byte, block.upstream_bytes, s);
      f.quarantined = true;
    } catch (...) {
      note_access_failure("poison the freed block", p);
    }
  }
  if (f.quarantined) {
    m.quarantine.push_back({a, f.serial});
    m.quarantined_bytes += block.upstream_bytes;
  } else {
    m.upstream->deallocate(p, block.upstream_bytes, block.alignment, s);
    m.history.push_back({a, f.serial});
  }
  m.freed[a] = std::move(f);
  m.trim_history();
}

void guard::impl::forget_freed_overlapping(std::uintptr_t begin, std::size_t bytes) {
  auto it = freed.lower_bound(begin);
  if (it != freed.begin()) {
    auto before = std::prev(it);
    if (before->first + before->second.was.upstream_bytes > begin) it = before;
  }
  while (it != freed.end() && it->first < begin + bytes) {
    // A quarantined block cannot be handed out again: the guard still holds it.
    if (it->second.quarantined) { ++it; continue; }
    it = freed.erase(it);
  }
}

std::size_t guard::impl::evict_quarantine(std::size_t budget) noexcept {
  std::size_t changed = 0;
  while (quarantined_bytes > budget && !quarantine.empty()) {
    const queued q = quarantine.front();
    quarantine.pop_front();
    auto it = freed.find(q.address);
    if (it == freed.end() || it->second.serial != q.serial) continue;  // defensive: cannot happen
    freed_block& f = it->second;
    if (check_one_poison(q.address, f)) ++changed;
    quarantined_bytes -= f.was.upstream_bytes;
    f.quarantined = false;
    upstream->deallocate(pointer_at(q.address), f.was.upstream_bytes, f.was.alignment,
                         f.freed_on);
    history.push_back(q);
  }
  trim_history();
  return changed;
}

bool guard::impl::check_one_poison(std::uintptr_t address, const freed_block& f) noexcept {
  try {
    std::vector<unsigned char> bytes(f.was.upstream_bytes);
    access->read(bytes.data(), pointer_at(address), bytes.size(), f.freed_on);
    const auto poisoned = [&](unsigned char c) { return c == opts.poison_byte; };
    const auto first = std::find_if_not(bytes.begin(), bytes.end(), poisoned);
    if (first == bytes.end()) return false;
    const auto changed =
        static_cast<std::size_t>(std::count_if(first, bytes.end(), [&](unsigned char c) {
          return !poisoned(c);
        }));
    report_write_after_free(address, f, static_cast<std::size_t>(first - bytes.begin()), changed,
                            *first);
    return true;
  } catch (...) {
    note_access_failure("check the poison", pointer_at(address));
    return false;
  }
}

void guard::impl::trim_history() noexcept {
  while (history.size() > opts.freed_history) {
    const queued q = history.front();
    history.pop_front();
    auto it = freed.find(q.address);
    if (it != freed.end() && it->second.serial == q.serial && !it->second.quarantined) {
      freed.erase(it);
    }
  }
}

std::size_t guard::check_poison() {
  std::lock_guard lock(impl_->mutex);
  std::size_t changed = 0;
  for (const impl::queued& q : impl_->quarantine) {
    auto it = impl_->freed.find(q.address);
    if (it != impl_->freed.end() && it->second.serial == q.serial &&
        impl_->check_one_poison(q.address, it->second)) {
      ++changed;
      // Poison it again so the same write is reported once, not at every later check.
      impl_->access->fill(reinterpret_cast<void*>(q.address), impl_->opts.poison_byte,
                          it->second.was.upstream_bytes, it->second.freed_on);
    }
  }
  return changed;
}

std::size_t guard::live_bytes() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->live_bytes;
}

std::size_t guard::quarantined_bytes() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->quarantined_bytes;
}

}  // namespace gpumem
