// The host verifier: the same pattern the GPU kernels write, written and read by the host, for
// targets whose blocks are host memory (`malloc`, tests). It is how the CPU suite exercises the
// real stamp-and-check path, bytes included.
#include <cstring>

#include "verify_pattern.hpp"
#include "gpumem/replay_verifier.hpp"

namespace gpumem {
namespace {

using verify_detail::verify_pattern;
using verify_detail::word_bytes;

class host_memory_verifier final : public replay_verifier {
 public:
  void stamp(void* p, std::size_t bytes, std::uint64_t tag, stream_ref) override {
    auto* out = static_cast<unsigned char*>(p);
    for (std::size_t w = 0; w < bytes / word_bytes; ++w) {
      const std::uint32_t v = verify_pattern(tag, w);
      std::memcpy(out + w * word_bytes, &v, word_bytes);  // memcpy: no aliasing or alignment assumptions
    }
  }
  void check(const void* p, std::size_t bytes, std::uint64_t tag, stream_ref, stream_ref) override {
    const auto* in = static_cast<const unsigned char*>(p);
    for (std::size_t w = 0; w < bytes / word_bytes; ++w) {
      std::uint32_t v;
      std::memcpy(&v, in + w * word_bytes, word_bytes);
      mismatched_ += v != verify_pattern(tag, w);
    }
  }
  std::uint64_t mismatched_words() override { return mismatched_; }

 private:
  std::uint64_t mismatched_ = 0;
};

}  // namespace

std::unique_ptr<replay_verifier> make_host_memory_verifier() { return std::make_unique<host_memory_verifier>(); }

}  // namespace gpumem
