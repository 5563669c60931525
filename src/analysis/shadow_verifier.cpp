// The shadow verifier: the simulated device's addresses are never backed, so instead of writing
// patterns this remembers which tag last stamped each byte, as non-overlapping ranges by start
// address. A check counts the words of the block not covered by its own tag: a block stamped over
// it (handed out while it was live) took them. Only sampled blocks come here, so a std::map is fast
// enough.
#include <algorithm>
#include <cstdint>
#include <functional>
#include <iterator>
#include <map>
#include <utility>

#include "verify_pattern.hpp"
#include "gpumem/replay_verifier.hpp"

namespace gpumem {
namespace {

using verify_detail::word_bytes;

class shadow_verifier final : public replay_verifier {
 public:
  explicit shadow_verifier(std::function<bool(const void*, std::size_t)> mapped) : mapped_(std::move(mapped)) {}

  void stamp(void* p, std::size_t bytes, std::uint64_t tag, stream_ref) override {
    const std::size_t words = bytes / word_bytes;
    if (!words) return;
    // Writing to unmapped memory would have faulted: leave the block unstamped, so its check fails.
    if (mapped_ && !mapped_(p, bytes)) return;
    const auto a = reinterpret_cast<std::uintptr_t>(p);
    const std::uintptr_t b = a + words * word_bytes;
    forget(a, b);
    ranges_.emplace(a, range{b, tag});
  }

  void check(const void* p, std::size_t bytes, std::uint64_t tag, stream_ref, stream_ref) override {
    const std::size_t words = bytes / word_bytes;
    if (!words) return;
    const auto a = reinterpret_cast<std::uintptr_t>(p);
    const std::uintptr_t b = a + words * word_bytes;
    std::size_t matching = 0;
    auto it = first_touching(a);
    while (it != ranges_.end() && it->first < b) {
      if (it->second.tag != tag) {
        ++it;
        continue;
      }
      // Whole words of the block inside this piece (offsets from the block's start).
      const std::uintptr_t lo = std::max(it->first, a) - a, hi = std::min(it->second.end, b) - a;
      const std::uintptr_t first_word = (lo + word_bytes - 1) / word_bytes, end_word = hi / word_bytes;
      if (end_word > first_word) matching += end_word - first_word;
      // The tag is this block's alone, so its pieces all lie in [a, b): the freed block's record goes.
      it = ranges_.erase(it);
    }
    if (mapped_ && !mapped_(p, bytes)) matching = 0;
    mismatched_ += words - matching;
  }

  std::uint64_t mismatched_words() override { return mismatched_; }

 private:
  struct range {
    std::uintptr_t end;
    std::uint64_t tag;
  };

  // The first range that ends after `a`.
  std::map<std::uintptr_t, range>::iterator first_touching(std::uintptr_t a) {
    auto it = ranges_.lower_bound(a);
    if (it != ranges_.begin() && std::prev(it)->second.end > a) --it;
    return it;
  }

  // Drops what is recorded for [a, b), keeping the parts of ranges outside it: a new stamp
  // overwrites those bytes.
  void forget(std::uintptr_t a, std::uintptr_t b) {
    auto it = first_touching(a);
    if (it != ranges_.end() && it->first < a) {  // keep its head [start, a), and a tail past b
      const range whole = it->second;
      it->second.end = a;
      if (whole.end > b) {
        ranges_.emplace(b, whole);
        return;
      }
      ++it;
    }
    while (it != ranges_.end() && it->first < b) {
      if (it->second.end > b) {  // keep its tail [b, end)
        const range tail = it->second;
        ranges_.erase(it);
        ranges_.emplace(b, tail);
        return;
      }
      it = ranges_.erase(it);
    }
  }

  std::function<bool(const void*, std::size_t)> mapped_;
  std::map<std::uintptr_t, range> ranges_;
  std::uint64_t mismatched_ = 0;
};

}  // namespace

std::unique_ptr<replay_verifier> make_shadow_verifier(std::function<bool(const void*, std::size_t)> mapped) {
  return std::make_unique<shadow_verifier>(std::move(mapped));
}

}  // namespace gpumem
