// The floor: every request gets exactly its bytes and gives them back at once, no caching, no
// rounding. Replayed traces measure their peak live bytes against it.
#include <fmt/format.h>

#include <stdexcept>
#include <unordered_map>

#include "gpumem/errors.hpp"
#include "gpumem/sim_device.hpp"

namespace gpumem {

struct exact_resource::state {
  std::size_t capacity;
  std::uintptr_t next = 0x7e0000000000;   // fresh addresses, never reused
  std::size_t live = 0, peak = 0;
  std::unordered_map<std::uintptr_t, std::size_t> blocks;
};

exact_resource::exact_resource(std::size_t capacity_bytes) : state_(std::make_unique<state>()) {
  state_->capacity = capacity_bytes;
}
exact_resource::~exact_resource() = default;

void* exact_resource::allocate(std::size_t bytes, std::size_t alignment, stream_ref) {
  if (!is_power_of_two(alignment))
    throw std::invalid_argument(fmt::format("exact_resource: alignment {} is not a power of two", alignment));
  // The same argument contract as the pool (resource.hpp / DESIGN): alignment up to the granule,
  // no absurd sizes — so the floor resource fails the same way the pool does on bad input.
  if (alignment > default_granularity)
    throw std::invalid_argument(fmt::format("exact_resource: alignment {} is over the {} B granule", alignment,
                                            default_granularity));
  if (bytes > (std::size_t{1} << 47))
    throw std::invalid_argument(fmt::format("exact_resource: {} bytes is not a plausible request (over 2^47)", bytes));
  if (bytes == 0) return nullptr;
  if (state_->live + bytes > state_->capacity || bytes > state_->capacity) {
    oom_report r;
    r.requested_bytes = bytes;
    r.alignment = alignment;
    r.reserved_bytes = r.live_bytes = state_->live;
    r.limit_bytes = state_->capacity;
    r.fragmentation = 1.0;
    r.advice = "the live bytes alone exceed the capacity: nothing a pool can do";
    throw out_of_memory(r);
  }
  std::uintptr_t a = align_up(state_->next, alignment);
  state_->next = a + bytes;
  state_->blocks.emplace(a, bytes);
  state_->live += bytes;
  if (state_->live > state_->peak) state_->peak = state_->live;
  return reinterpret_cast<void*>(a);
}

void exact_resource::deallocate(void* p, std::size_t bytes, std::size_t, stream_ref) noexcept {
  if (!p) return;
  auto it = state_->blocks.find(reinterpret_cast<std::uintptr_t>(p));
  if (it == state_->blocks.end()) {
    report_misuse({misuse_kind::unknown_pointer, p, bytes, 0, "exact_resource: not allocated here"});
    return;
  }
  if (it->second != bytes) {
    report_misuse({misuse_kind::size_mismatch, p, bytes, it->second, "exact_resource"});
    return;
  }
  state_->live -= bytes;
  state_->blocks.erase(it);
}

std::size_t exact_resource::live_bytes() const noexcept { return state_->live; }
std::size_t exact_resource::peak_live_bytes() const noexcept { return state_->peak; }

}  // namespace gpumem
