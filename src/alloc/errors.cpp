// Messages for what the library throws, and the misuse handler.
#include "gpumem/errors.hpp"
#include "gpumem/upstream.hpp"

#include <fmt/format.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>

namespace gpumem {
namespace {

std::string bytes_text(std::size_t b) {
  if (b >= (std::size_t{1} << 30)) return fmt::format("{} B ({:.2f} GiB)", b, double(b) / double(1 << 30));
  if (b >= (std::size_t{1} << 20)) return fmt::format("{} B ({:.2f} MiB)", b, double(b) / double(1 << 20));
  if (b >= (std::size_t{1} << 10)) return fmt::format("{} B ({:.2f} KiB)", b, double(b) / 1024.0);
  return fmt::format("{} B", b);
}

void default_misuse_handler(const misuse_report& r) {
  std::fprintf(stderr, "gpumem: misuse: %s\n", describe(r).c_str());
  std::fflush(stderr);
  std::abort();
}

std::atomic<misuse_handler> current_handler{&default_misuse_handler};

}  // namespace

std::string describe(const oom_report& r) {
  std::string s = fmt::format(
      "gpumem: out of memory: requested {} (alignment {}) on stream {:#x}; reserved {}, live {}, "
      "cached {}, largest free block {}",
      bytes_text(r.requested_bytes), r.alignment, r.stream.value(), bytes_text(r.reserved_bytes),
      bytes_text(r.live_bytes), bytes_text(r.cached_bytes), bytes_text(r.largest_free_block_bytes));
  if (r.limit_bytes) s += fmt::format(", pool limit {}", bytes_text(r.limit_bytes));
  s += fmt::format(", fragmentation (reserved/live) {:.3f}", r.fragmentation);
  if (!r.cached_per_stream.empty()) {
    s += "; free bytes cached per stream:";
    for (const auto& c : r.cached_per_stream) s += fmt::format(" {:#x}={}", c.stream.value(), bytes_text(c.bytes));
  }
  if (!r.upstream_said.empty()) s += "; upstream: " + r.upstream_said;
  if (!r.advice.empty()) s += ". Advice: " + r.advice;
  return s;
}

out_of_memory::out_of_memory(oom_report r) : report_(std::move(r)), message_(describe(report_)) {}

cuda_error::cuda_error(std::string call, int code, std::string code_name, std::string text)
    : std::runtime_error(fmt::format("{} failed: {} ({}): {}", call, code_name, code, text)),
      call_(std::move(call)),
      code_(code) {}

const char* to_string(misuse_kind k) noexcept {
  switch (k) {
    case misuse_kind::unknown_pointer: return "unknown pointer";
    case misuse_kind::double_free: return "double free";
    case misuse_kind::size_mismatch: return "size mismatch";
    case misuse_kind::alignment_mismatch: return "alignment mismatch";
    case misuse_kind::wrong_stream: return "wrong stream";
    case misuse_kind::buffer_overrun: return "write past the end of a block";
    case misuse_kind::use_after_free: return "use after free";
    case misuse_kind::leak: return "leak";
    case misuse_kind::wrong_resource: return "pointer of another resource";
  }
  return "misuse";
}

std::string describe(const misuse_report& r) {
  std::string s = fmt::format("{} at {}", to_string(r.kind), fmt::ptr(r.pointer));
  if (r.bytes_given || r.bytes_expected)
    s += fmt::format(" (bytes given {}, bytes expected {})", r.bytes_given, r.bytes_expected);
  if (!r.detail.empty()) s += ": " + r.detail;
  return s;
}

misuse_handler set_misuse_handler(misuse_handler h) noexcept {
  return current_handler.exchange(h ? h : &default_misuse_handler);
}

void report_misuse(const misuse_report& r) noexcept { current_handler.load()(r); }

void upstream::zero(void*, std::size_t, stream_ref) {
  throw std::logic_error(fmt::format("upstream {} cannot zero memory (zero_on_free needs one that can)", name()));
}

}  // namespace gpumem
