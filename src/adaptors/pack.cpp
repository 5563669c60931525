// plan_pack: the layout of many small buffers in one block (see pack.hpp for the ordering rule).
#include "gpumem/pack.hpp"

#include <algorithm>
#include <limits>
#include <numeric>
#include <stdexcept>
#include <string>

namespace gpumem {

namespace {

[[noreturn]] void bad_request(std::size_t i, const pack_request& q, const std::string& why) {
  throw std::invalid_argument("gpumem::plan_pack: request " + std::to_string(i) + " (" +
                              std::to_string(q.bytes) + " bytes, alignment " +
                              std::to_string(q.alignment) + "): " + why);
}

}  // namespace

pack_layout plan_pack(std::span<const pack_request> requests) {
  constexpr std::size_t max = std::numeric_limits<std::size_t>::max();
  pack_layout out;
  out.offsets.resize(requests.size());
  for (std::size_t i = 0; i < requests.size(); ++i) {
    if (!is_power_of_two(requests[i].alignment)) {
      bad_request(i, requests[i], requests[i].alignment == 0 ? "alignment is 0"
                                                               : "alignment is not a power of two");
    }
    out.alignment = std::max(out.alignment, requests[i].alignment);
  }

  // Decreasing alignment, caller's order among equals.
  std::vector<std::size_t> order(requests.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return requests[a].alignment > requests[b].alignment;
  });

  std::size_t end = 0;
  std::size_t payload = 0;
  for (std::size_t i : order) {
    const pack_request& q = requests[i];
    if (end > max - (q.alignment - 1)) bad_request(i, q, "the pack's total overflows size_t");
    const std::size_t offset = align_up(end, q.alignment);
    if (q.bytes > max - offset) bad_request(i, q, "the pack's total overflows size_t");
    out.offsets[i] = offset;
    end = offset + q.bytes;
    payload += q.bytes;  // <= end, so it cannot overflow
  }
  out.total_bytes = end;
  out.padding_bytes = end - payload;
  return out;
}

}  // namespace gpumem
