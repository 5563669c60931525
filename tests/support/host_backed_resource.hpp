#pragma once
// A resource that returns real host memory (std::aligned_alloc), so tests of debug adaptors can
// plant real bytes: canaries, poison, overruns. It keeps its own books and counts misuse it sees
// (a free it did not hand out, or with other figures) instead of crashing, so a test can assert
// that an adaptor above it forwarded nothing wrong.
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>

#include "gpumem/core.hpp"
#include "gpumem/resource.hpp"

namespace gpumem::testing {

class host_backed_resource {
 public:
  // `capacity_bytes`: requests that would take live bytes past it throw std::bad_alloc.
  explicit host_backed_resource(std::size_t capacity_bytes = std::size_t{1} << 30);
  ~host_backed_resource();  // frees whatever is still live
  host_backed_resource(const host_backed_resource&) = delete;
  host_backed_resource& operator=(const host_backed_resource&) = delete;

  void* allocate(std::size_t bytes, std::size_t alignment = default_alignment, stream_ref s = {});
  void deallocate(void* p, std::size_t bytes, std::size_t alignment = default_alignment,
                  stream_ref s = {}) noexcept;

  std::size_t live_bytes() const;
  std::size_t live_count() const;
  std::uint64_t allocations() const;
  std::uint64_t deallocations() const;
  // Frees this resource refused: pointer unknown, or size/alignment not as allocated.
  std::uint64_t bad_frees() const;

 private:
  struct block { std::size_t bytes; std::size_t alignment; };
  mutable std::mutex mutex_;
  std::map<const void*, block> live_;
  std::size_t capacity_;
  std::size_t live_bytes_ = 0;
  std::uint64_t allocations_ = 0;
  std::uint64_t deallocations_ = 0;
  std::uint64_t bad_frees_ = 0;
};

static_assert(resource<host_backed_resource>);

}  // namespace gpumem::testing
