// The host implementation of memory_access: plain memset/memcpy.
#include <cstring>

#include "gpumem/memory_access.hpp"

namespace gpumem {
namespace {

class host_access final : public memory_access {
 public:
  std::string name() const override { return "host (memset/memcpy)"; }
  void fill(void* dst, unsigned char value, std::size_t bytes, stream_ref) override {
    if (bytes != 0) std::memset(dst, value, bytes);
  }
  void read(void* host_dst, const void* src, std::size_t bytes, stream_ref) override {
    if (bytes != 0) std::memcpy(host_dst, src, bytes);
  }
};

}  // namespace

memory_access& host_memory_access() noexcept {
  static host_access access;
  return access;
}

}  // namespace gpumem
