#pragma once
// Call stacks for debug reports: cheap to capture (raw return addresses only), symbolized only
// when a report is written, since most captured stacks (every allocation's) are never printed.
#include <array>
#include <cstddef>
#include <string>

namespace gpumem::detail {

struct call_stack {
  static constexpr std::size_t max_frames = 32;
  std::array<void*, max_frames> frames{};
  std::size_t depth = 0;

  bool empty() const noexcept { return depth == 0; }
};

// Captures the caller's stack, leaving out `skip` innermost frames beyond this function itself,
// and keeping at most `max_depth` (<= call_stack::max_frames) frames.
call_stack capture_call_stack(std::size_t skip, std::size_t max_depth) noexcept;

// One frame a line, each prefixed by `indent`: "#i function+offset (binary) [address]", C++
// names demangled where abi::__cxa_demangle can. Functions of an executable show names only when
// it is linked with -rdynamic (ENABLE_EXPORTS); otherwise the address and binary are shown.
std::string format_call_stack(const call_stack& stack, const std::string& indent);

}  // namespace gpumem::detail
