// The guard's messages: one misuse report per misuse, naming the pointer, the sizes and the call
// sites known (allocation, first free, this free). Also the leak report and live() listing.
#include <fmt/format.h>

#include <cstdio>
#include <exception>
#include <iterator>

#include "guard_impl.hpp"

namespace gpumem {

namespace detail {

std::string stream_name(stream_ref s) {
  return s == stream_ref{} ? std::string("0 (default stream)") : fmt::format("{:#x}", s.value());
}

std::string stack_text(const call_stack& s) { return format_call_stack(s, "    "); }

}  // namespace detail

namespace {

const void* as_ptr(std::uintptr_t a) noexcept { return reinterpret_cast<const void*>(a); }

// Building a message allocates; if that fails there is still the kind and the figures.
void send(misuse_kind kind, const void* p, std::size_t given, std::size_t expected,
          const std::function<std::string()>& detail) noexcept {
  misuse_report r{kind, p, given, expected, {}};
  try {
    r.detail = detail();
  } catch (...) {
    r.detail = "gpumem::guard: (could not format the details: out of memory)";
  }
  report_misuse(r);
}

}  // namespace

std::string guard::impl::pinned_line() const {
  if (!opts.pinned_host_usage) return {};
  try {
    const auto [total, cap] = opts.pinned_host_usage();
    return fmt::format("  pinned host memory in this process: {} bytes of a {}-byte cap\n", total,
                       cap);
  } catch (const std::exception& e) {
    return fmt::format("  pinned host memory in this process: unknown ({})\n", e.what());
  }
}

void guard::impl::report_unmatched_free(void* p, std::size_t bytes, std::size_t alignment,
                                        stream_ref s, const detail::call_stack& here) const
    noexcept {
  const std::uintptr_t a = reinterpret_cast<std::uintptr_t>(p);
  if (auto f = freed.find(a); f != freed.end()) {
    const freed_block& fb = f->second;
    send(misuse_kind::double_free, p, bytes, fb.was.bytes, [&] {
      return fmt::format(
          "gpumem::guard: double free of {} ({} bytes given, {} allocated, alignment {}) on "
          "stream {}; it was already freed on stream {}{}.\n"
          "  allocated at:\n{}  first freed at:\n{}  freed again at:\n{}{}",
          p, bytes, fb.was.bytes, alignment, detail::stream_name(s),
          detail::stream_name(fb.freed_on),
          fb.quarantined ? " and is still in the guard's quarantine" : "",
          detail::stack_text(fb.was.allocated_at), detail::stack_text(fb.freed_at),
          detail::stack_text(here), pinned_line());
    });
    return;
  }
  // An interior pointer: inside a live block (canary included) but not its start.
  if (auto next = live.upper_bound(a); next != live.begin()) {
    // Plain references, not a structured binding: clang 14 (the fuzz build) cannot capture one.
    const auto base = std::prev(next)->first;
    const auto& b = std::prev(next)->second;
    if (a < base + b.upstream_bytes) {
      send(misuse_kind::unknown_pointer, p, bytes, b.bytes, [&] {
        return fmt::format(
            "gpumem::guard: free of interior pointer {} ({} bytes given): it lies {} bytes into "
            "the live block {} of {} bytes, which was not freed.\n"
            "  block allocated at:\n{}  bad free at:\n{}{}",
            p, bytes, a - base, as_ptr(base), b.bytes, detail::stack_text(b.allocated_at),
            detail::stack_text(here), pinned_line());
      });
      return;
    }
  }
  if (auto next = freed.upper_bound(a); next != freed.begin()) {
    const auto base = std::prev(next)->first;
    const auto& fb = std::prev(next)->second;
    if (a < base + fb.was.upstream_bytes) {
      send(misuse_kind::unknown_pointer, p, bytes, fb.was.bytes, [&] {
        return fmt::format(
            "gpumem::guard: free of {} ({} bytes given): it lies {} bytes into the block {} of "
            "{} bytes, which was already freed.\n"
            "  block allocated at:\n{}  block freed at:\n{}  bad free at:\n{}{}",
            p, bytes, a - base, as_ptr(base), fb.was.bytes,
            detail::stack_text(fb.was.allocated_at), detail::stack_text(fb.freed_at),
            detail::stack_text(here), pinned_line());
      });
      return;
    }
  }
  send(misuse_kind::unknown_pointer, p, bytes, 0, [&] {
    return fmt::format(
        "gpumem::guard: free of unknown pointer {} ({} bytes, alignment {}, stream {}): this "
        "guard never handed it out (another resource's memory, or a stale pointer).\n"
        "  freed at:\n{}{}",
        p, bytes, alignment, detail::stream_name(s), detail::stack_text(here), pinned_line());
  });
}

void guard::impl::report_mismatch(void* p, std::size_t bytes, std::size_t alignment,
                                  const live_block& b, const detail::call_stack& here) const
    noexcept {
  const bool size_wrong = bytes != b.bytes;
  const misuse_kind kind = size_wrong ? misuse_kind::size_mismatch : misuse_kind::alignment_mismatch;
  send(kind, p, bytes, b.bytes, [&] {
    std::string what;
    if (size_wrong) what = fmt::format("size {} bytes but it was allocated with {} bytes", bytes, b.bytes);
    if (alignment != b.alignment) {
      if (!what.empty()) what += ", and ";
      what += fmt::format("alignment {} but it was allocated with alignment {}", alignment,
                          b.alignment);
    }
    return fmt::format(
        "gpumem::guard: free of {} with {}; the block is freed with the allocated figures.\n"
        "  allocated at:\n{}  freed at:\n{}{}",
        p, what, detail::stack_text(b.allocated_at), detail::stack_text(here), pinned_line());
  });
}

void guard::impl::report_overrun(void* p, const live_block& b, std::size_t first_changed_offset,
                                 std::size_t changed, unsigned char found,
                                 const detail::call_stack& here) const noexcept {
  send(misuse_kind::buffer_overrun, p, b.bytes, b.bytes, [&] {
    return fmt::format(
        "gpumem::guard: write past the end of {} ({} bytes): the canary byte at offset {} "
        "(byte {} past the end) is {:#04x}, not {:#04x}; {} of the {} canary bytes changed.\n"
        "  allocated at:\n{}  freed at:\n{}{}",
        p, b.bytes, b.bytes + first_changed_offset, first_changed_offset, found, opts.canary_byte,
        changed, opts.canary_bytes, detail::stack_text(b.allocated_at), detail::stack_text(here),
        pinned_line());
  });
}

void guard::impl::report_write_after_free(std::uintptr_t address, const freed_block& f,
                                          std::size_t first_changed_offset, std::size_t changed,
                                          unsigned char found) const noexcept {
  send(misuse_kind::use_after_free, as_ptr(address), f.was.bytes, f.was.bytes, [&] {
    return fmt::format(
        "gpumem::guard: write after free to {} ({} bytes): the byte at offset {} is {:#04x}, "
        "not the poison {:#04x}; {} of {} bytes changed after the free on stream {}.\n"
        "  allocated at:\n{}  freed at:\n{}{}",
        as_ptr(address), f.was.bytes, first_changed_offset, found, opts.poison_byte, changed,
        f.was.upstream_bytes, detail::stream_name(f.freed_on), detail::stack_text(f.was.allocated_at),
        detail::stack_text(f.freed_at), pinned_line());
  });
}

std::string guard::impl::leak_text() const {
  if (live.empty()) return {};
  std::string out = fmt::format("gpumem::guard: {} allocation(s) of {} bytes in all still live:\n",
                                live.size(), live_bytes);
  for (const auto& [a, b] : live) {
    out += fmt::format("  {}: {} bytes, alignment {}, stream {}, allocated at:\n{}", as_ptr(a),
                       b.bytes, b.alignment, detail::stream_name(b.stream),
                       detail::stack_text(b.allocated_at));
  }
  out += pinned_line();
  return out;
}

std::size_t guard::report_leaks() {
  std::lock_guard lock(impl_->mutex);
  if (impl_->live.empty()) return 0;
  const auto& first = *impl_->live.begin();
  send(misuse_kind::leak, as_ptr(first.first), 0, impl_->live_bytes,
       [&] { return impl_->leak_text(); });
  return impl_->live.size();
}

std::string guard::leak_report() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->leak_text();
}

std::vector<guarded_allocation> guard::live() const {
  std::lock_guard lock(impl_->mutex);
  std::vector<guarded_allocation> out;
  out.reserve(impl_->live.size());
  for (const auto& [a, b] : impl_->live) {
    out.push_back({as_ptr(a), b.bytes, b.alignment, b.stream, detail::stack_text(b.allocated_at)});
  }
  return out;
}

}  // namespace gpumem
