#pragma once
// What the library throws, and where detected misuse goes.
#include <cstddef>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

#include "gpumem/core.hpp"

namespace gpumem {

// The figures an out-of-memory report carries. Every field is in bytes unless named otherwise.
struct oom_report {
  std::size_t requested_bytes = 0;
  std::size_t alignment = 0;
  stream_ref stream = {};
  std::size_t reserved_bytes = 0;        // what the pool holds from its upstream
  std::size_t live_bytes = 0;            // what callers hold
  std::size_t cached_bytes = 0;          // reserved that is not live
  std::size_t largest_free_block_bytes = 0;
  std::size_t limit_bytes = 0;           // the pool's own cap (max_reserved), 0 = none
  struct stream_cache { stream_ref stream; std::size_t bytes; };
  std::vector<stream_cache> cached_per_stream;  // free bytes still owned by a stream
  double fragmentation = 0.0;            // reserved / live at the time of failure
  std::string upstream_said;             // the upstream's own words, when it refused
  std::string advice;                    // what would help, derived from the figures
};

std::string describe(const oom_report& r);

// Thrown when a request cannot be served even after the pool released what it caches and waited
// for pending frees. A std::bad_alloc so code that catches that keeps working.
class out_of_memory : public std::bad_alloc {
 public:
  explicit out_of_memory(oom_report r);
  const char* what() const noexcept override { return message_.c_str(); }
  const oom_report& report() const noexcept { return report_; }

 private:
  oom_report report_;
  std::string message_;
};

// Thrown by the CUDA layer: the call, the numeric code and its name.
class cuda_error : public std::runtime_error {
 public:
  cuda_error(std::string call, int code, std::string code_name, std::string text);
  int code() const noexcept { return code_; }
  const std::string& call() const noexcept { return call_; }

 private:
  std::string call_;
  int code_;
};

// Misuse a noexcept deallocate detects. It cannot throw, so it reports to a handler.
enum class misuse_kind { unknown_pointer, double_free, size_mismatch, alignment_mismatch,
                         wrong_stream, buffer_overrun, use_after_free, leak, wrong_resource };
const char* to_string(misuse_kind k) noexcept;

struct misuse_report {
  misuse_kind kind;
  const void* pointer = nullptr;
  std::size_t bytes_given = 0;      // what the caller passed
  std::size_t bytes_expected = 0;   // what the pool knows, when it knows
  std::string detail;               // one clear sentence; call sites when known
};

// The default handler prints the report on stderr and aborts: a double free in a GPU allocator is
// memory corruption waiting to happen, so carrying on is the wrong default.
using misuse_handler = void (*)(const misuse_report&);
misuse_handler set_misuse_handler(misuse_handler h) noexcept;  // returns the previous one
void report_misuse(const misuse_report& r) noexcept;
std::string describe(const misuse_report& r);

}  // namespace gpumem
