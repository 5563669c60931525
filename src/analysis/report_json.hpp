#pragma once
// The report's JSON writer: the library does not depend on a JSON package, and the page's data
// blob is written in one pass.
#include <fmt/format.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>

namespace gpumem::detail {

class json_out {
 public:
  std::string s;
  void raw(std::string_view v) { s += v; }
  void str(std::string_view v) {
    s += '"';
    for (unsigned char c : v) {
      switch (c) {
        case '"': s += "\\\""; break;
        case '\\': s += "\\\\"; break;
        case '\n': s += "\\n"; break;
        case '\r': s += "\\r"; break;
        case '\t': s += "\\t"; break;
        case '<': s += "\\u003c"; break;  // never "</script>" inside the blob
        case '>': s += "\\u003e"; break;
        case '&': s += "\\u0026"; break;
        default:
          if (c < 0x20)
            s += fmt::format("\\u{:04x}", c);
          else
            s += static_cast<char>(c);
      }
    }
    s += '"';
  }
  void num(std::uint64_t v) { s += fmt::format("{}", v); }
  void num(std::int64_t v) { s += fmt::format("{}", v); }
  void num(double v) { s += std::isfinite(v) ? fmt::format("{}", v) : std::string("null"); }
  void key(std::string_view k) {
    comma();
    str(k);
    s += ':';
  }
  void open(char c) {
    comma();
    s += c;
  }
  void close(char c) { s += c; }
  // Before a key or an array item: a comma unless first in its object or array.
  void comma() {
    if (!s.empty() && s.back() != '[' && s.back() != '{' && s.back() != ':') s += ',';
  }
  template <class T>
  void kv(std::string_view k, const T& v) {
    key(k);
    val(v);
  }
  void val(std::string_view v) { str(v); }
  void val(const std::string& v) { str(v); }
  void val(const char* v) { str(v); }
  void val(bool v) { s += v ? "true" : "false"; }
  void val(double v) { num(v); }
  template <class T>
    requires std::is_integral_v<T>
  void val(T v) {
    if constexpr (std::is_signed_v<T>)
      num(static_cast<std::int64_t>(v));
    else
      num(static_cast<std::uint64_t>(v));
  }
  template <class T>
  void item(const T& v) {
    comma();
    val(v);
  }
};

}  // namespace gpumem::detail
