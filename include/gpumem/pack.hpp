#pragma once
// gpumem::pack — many small buffers in ONE allocation (seed pitfall 4: many small objects).
//
// Thousands of tiny allocations each pay the allocator's per-call cost, a lookup at free, and
// rounding to the allocator's alignment (256 B by default: a 64-byte buffer costs 256). A pack lays
// the buffers out in one block with each buffer's own alignment, allocates that block once, and
// frees it once.
//
// Layout: buffers are placed in order of decreasing alignment, keeping the caller's order among
// equal alignments (a stable sort). Every buffer's offset is then a multiple of its alignment
// given only that the buffer before it ends on a multiple of the next one's alignment, so the
// padding before a buffer is less than its alignment, and no padding is needed at all when sizes
// are multiples of their alignment. The block's alignment is the largest buffer alignment; its size
// is where the last buffer ends. Results (offsets, pointers) are indexed in the caller's order.
#include <cstddef>
#include <initializer_list>
#include <span>
#include <utility>
#include <vector>

#include "gpumem/core.hpp"
#include "gpumem/resource.hpp"

namespace gpumem {

struct pack_request {
  std::size_t bytes = 0;        // may be 0: the buffer gets an aligned offset and no bytes
  std::size_t alignment = 0;    // a power of two; no default, so the choice is explicit
};

struct pack_layout {
  std::vector<std::size_t> offsets;  // offsets[i] is request i's offset in the block
  std::size_t total_bytes = 0;       // bytes to allocate: end of the last buffer
  std::size_t alignment = 1;         // the block's alignment: the largest of the requests'
  std::size_t padding_bytes = 0;     // total_bytes - sum of the requests' bytes
};

// Throws std::invalid_argument naming the request (index, bytes, alignment) when an alignment is
// 0 or not a power of two, or when the total does not fit in size_t.
pack_layout plan_pack(std::span<const pack_request> requests);

// One block holding every requested buffer. Move-only; frees the block (on the stream it was
// allocated on, unless reset() says another) when destroyed. The memory is the resource's: device
// memory is not addressable from the host, and the spans only carry the address and size.
template <resource R>
class pack {
 public:
  pack() = default;
  // Plans the layout and allocates total_bytes with the block's alignment on `s`. Throws what
  // plan_pack or the resource throws. An empty or all-zero-size request list allocates nothing.
  pack(R& r, std::span<const pack_request> requests, stream_ref s = {})
      : resource_(&r), layout_(plan_pack(requests)), stream_(s) {
    if (layout_.total_bytes != 0) {
      base_ = static_cast<std::byte*>(r.allocate(layout_.total_bytes, layout_.alignment, s));
    }
    sizes_.reserve(requests.size());
    for (const pack_request& q : requests) sizes_.push_back(q.bytes);
  }
  pack(R& r, std::initializer_list<pack_request> requests, stream_ref s = {})
      : pack(r, std::span<const pack_request>(requests.begin(), requests.size()), s) {}

  ~pack() { reset(); }
  pack(pack&& o) noexcept { *this = std::move(o); }
  pack& operator=(pack&& o) noexcept {
    if (this != &o) {
      reset();
      resource_ = std::exchange(o.resource_, nullptr);
      layout_ = std::exchange(o.layout_, {});
      sizes_ = std::exchange(o.sizes_, {});
      base_ = std::exchange(o.base_, nullptr);
      stream_ = o.stream_;
    }
    return *this;
  }
  pack(const pack&) = delete;
  pack& operator=(const pack&) = delete;

  // Frees the block after the work enqueued on `s` (default: the allocating stream); the pack is
  // then empty.
  void reset() noexcept { reset(stream_); }
  void reset(stream_ref s) noexcept {
    if (base_ != nullptr) resource_->deallocate(base_, layout_.total_bytes, layout_.alignment, s);
    base_ = nullptr;
    layout_ = {};
    sizes_.clear();
  }

  std::size_t size() const noexcept { return sizes_.size(); }   // number of buffers
  bool empty() const noexcept { return sizes_.empty(); }
  void* data(std::size_t i) const noexcept { return base_ + layout_.offsets[i]; }
  std::span<std::byte> bytes(std::size_t i) const noexcept {
    return {base_ + layout_.offsets[i], sizes_[i]};
  }
  template <class T>
  T* as(std::size_t i) const noexcept { return reinterpret_cast<T*>(data(i)); }

  void* base() const noexcept { return base_; }
  std::size_t total_bytes() const noexcept { return layout_.total_bytes; }
  std::size_t alignment() const noexcept { return layout_.alignment; }
  const pack_layout& layout() const noexcept { return layout_; }
  stream_ref stream() const noexcept { return stream_; }

 private:
  R* resource_ = nullptr;
  pack_layout layout_;
  std::vector<std::size_t> sizes_;
  std::byte* base_ = nullptr;
  stream_ref stream_ = {};
};

}  // namespace gpumem
