// glibc backtrace + backtrace_symbols, names demangled with abi::__cxa_demangle.
#include "call_stack.hpp"

#include <cxxabi.h>
#include <execinfo.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string_view>

namespace gpumem::detail {

call_stack capture_call_stack(std::size_t skip, std::size_t max_depth) noexcept {
  // One extra frame for this function itself.
  std::array<void*, call_stack::max_frames + 16> raw{};
  const std::size_t want = std::min(raw.size(), skip + 1 + std::min(max_depth, call_stack::max_frames));
  const int got = ::backtrace(raw.data(), static_cast<int>(want));
  call_stack out;
  for (std::size_t i = skip + 1; i < static_cast<std::size_t>(std::max(got, 0)) &&
                                 out.depth < std::min(max_depth, call_stack::max_frames);
       ++i) {
    out.frames[out.depth++] = raw[i];
  }
  return out;
}

namespace {

// backtrace_symbols gives "binary(mangled+0xoff) [0xaddr]" (the name part may be empty).
// Returns "demangled+0xoff (binary) [0xaddr]", or the line unchanged when it has another shape.
std::string pretty_frame(std::string_view line) {
  const auto open = line.find('(');
  const auto close = line.find(')', open == std::string_view::npos ? 0 : open);
  if (open == std::string_view::npos || close == std::string_view::npos) return std::string(line);
  const std::string_view binary = line.substr(0, open);
  const std::string_view inside = line.substr(open + 1, close - open - 1);
  const std::string_view rest = line.substr(close + 1);
  const auto plus = inside.find('+');
  const std::string mangled(inside.substr(0, plus));
  const std::string_view offset = plus == std::string_view::npos ? "" : inside.substr(plus);

  std::string name;
  if (!mangled.empty()) {
    int status = 0;
    std::unique_ptr<char, decltype(&std::free)> demangled(
        abi::__cxa_demangle(mangled.c_str(), nullptr, nullptr, &status), &std::free);
    name = (status == 0 && demangled) ? std::string(demangled.get()) : mangled;
    name += offset;
  } else {
    name = "??";  // no exported symbol: the address and binary still locate it (addr2line)
    name += offset;
  }
  std::string out = name;
  out += " (";
  out += binary;
  out += ")";
  out += rest;
  return out;
}

}  // namespace

std::string format_call_stack(const call_stack& stack, const std::string& indent) {
  if (stack.empty()) return indent + "(no call stack captured)\n";
  std::unique_ptr<char*, decltype(&std::free)> symbols(
      ::backtrace_symbols(stack.frames.data(), static_cast<int>(stack.depth)), &std::free);
  std::string out;
  for (std::size_t i = 0; i < stack.depth; ++i) {
    out += indent;
    out += '#';
    out += std::to_string(i);
    out += ' ';
    if (symbols) {
      out += pretty_frame(symbols.get()[i]);
    } else {
      char buf[32];
      std::snprintf(buf, sizeof buf, "%p", stack.frames[i]);
      out += buf;
    }
    out += '\n';
  }
  return out;
}

}  // namespace gpumem::detail
