#include "support/host_backed_resource.hpp"

#include <cstdlib>
#include <new>
#include <stdexcept>
#include <string>

namespace gpumem::testing {

host_backed_resource::host_backed_resource(std::size_t capacity_bytes) : capacity_(capacity_bytes) {}

host_backed_resource::~host_backed_resource() {
  for (const auto& [p, b] : live_) std::free(const_cast<void*>(p));
}

void* host_backed_resource::allocate(std::size_t bytes, std::size_t alignment, stream_ref) {
  if (!is_power_of_two(alignment)) {
    throw std::invalid_argument("host_backed_resource: alignment " + std::to_string(alignment) +
                                " is not a power of two");
  }
  if (bytes == 0) return nullptr;
  std::lock_guard lock(mutex_);
  if (bytes > capacity_ - live_bytes_) throw std::bad_alloc();
  // aligned_alloc wants a size that is a multiple of the alignment, and an alignment of at least
  // a pointer's.
  const std::size_t a = alignment < alignof(void*) ? alignof(void*) : alignment;
  void* p = std::aligned_alloc(a, align_up(bytes, a));
  if (p == nullptr) throw std::bad_alloc();
  live_[p] = {bytes, alignment};
  live_bytes_ += bytes;
  ++allocations_;
  return p;
}

void host_backed_resource::deallocate(void* p, std::size_t bytes, std::size_t alignment,
                                      stream_ref) noexcept {
  if (p == nullptr) return;
  std::lock_guard lock(mutex_);
  auto it = live_.find(p);
  if (it == live_.end() || it->second.bytes != bytes || it->second.alignment != alignment) {
    ++bad_frees_;  // leave the memory alone: freeing it would turn a test failure into a crash
    return;
  }
  live_bytes_ -= bytes;
  live_.erase(it);
  ++deallocations_;
  std::free(p);
}

std::size_t host_backed_resource::live_bytes() const { std::lock_guard l(mutex_); return live_bytes_; }
std::size_t host_backed_resource::live_count() const { std::lock_guard l(mutex_); return live_.size(); }
std::uint64_t host_backed_resource::allocations() const { std::lock_guard l(mutex_); return allocations_; }
std::uint64_t host_backed_resource::deallocations() const { std::lock_guard l(mutex_); return deallocations_; }
std::uint64_t host_backed_resource::bad_frees() const { std::lock_guard l(mutex_); return bad_frees_; }

}  // namespace gpumem::testing
