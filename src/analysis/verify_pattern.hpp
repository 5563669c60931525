#pragma once
// The pattern a soak stamps into a verified block: word i of a block stamped with `tag` holds
// verify_pattern(tag, i). One definition for the host verifiers and the GPU kernels, so both stamp
// the same bytes. A hash of (tag, word) makes every block's contents differ from every other
// block's, and every word from its neighbours, so a shifted or foreign copy does not pass.
#include <cstddef>
#include <cstdint>

#if defined(__CUDACC__)
#define GPUMEM_HOST_DEVICE __host__ __device__
#else
#define GPUMEM_HOST_DEVICE
#endif

namespace gpumem::verify_detail {

// Patterns are 32-bit words; a block's tail shorter than a word is neither stamped nor checked.
inline constexpr std::size_t word_bytes = 4;

GPUMEM_HOST_DEVICE constexpr std::uint32_t verify_pattern(std::uint64_t tag, std::uint64_t word) {
  std::uint64_t x = tag * 0x9E3779B97F4A7C15ull ^ (word + 0x632BE59BD9B4E019ull);
  x ^= x >> 31;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 29;
  return static_cast<std::uint32_t>(x);
}

}  // namespace gpumem::verify_detail
