#pragma once
// An open-addressing hash map from addresses to small values: the front cache's table of live
// allocations. Linear probing with backward-shift deletion (no tombstones), so lookups stay short
// however long the program runs. Not thread-safe: its front cache's lock guards it.
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace gpumem::detail {

template <class V>
class pointer_map {
 public:
  pointer_map() { rehash(64); }

  [[gnu::always_inline]] V* find(std::uintptr_t key) noexcept {
    for (std::size_t i = slot_of(key);; i = (i + 1) & mask_) {
      if (slots_[i].key == key) return &slots_[i].value;
      if (slots_[i].key == 0) return nullptr;
    }
  }
  const V* find(std::uintptr_t key) const noexcept { return const_cast<pointer_map*>(this)->find(key); }
  // At most a quarter full: a lookup then finds its key at the first slot nearly always (a free's
  // common path does one), where at half full a second probe comes often enough, and at random,
  // to cost mispredicted branches on the common path. The price is twice the table: 16 B a slot,
  // 4 to 8 slots for each block a thread's front cache holds.
  [[gnu::always_inline]] void insert(std::uintptr_t key, const V& value) {
    if ((size_ + 1) * 4 > mask_ + 1) [[unlikely]] grow();
    std::size_t i = slot_of(key);
    while (slots_[i].key != 0) i = (i + 1) & mask_;
    slots_[i] = {key, value};
    ++size_;
  }
  bool erase(std::uintptr_t key) noexcept {
    std::size_t i = slot_of(key);
    while (slots_[i].key != key) {
      if (slots_[i].key == 0) return false;
      i = (i + 1) & mask_;
    }
    erase_index(i);
    return true;
  }
  std::size_t size() const noexcept { return size_; }
  template <class F>
  void for_each(F&& f) const {
    for (const auto& s : slots_)
      if (s.key) f(s.key, s.value);
  }

 private:
  struct slot {
    std::uintptr_t key = 0;  // 0: empty (no allocation lives at address 0)
    V value{};
  };
  void erase_index(std::size_t i) noexcept {
    // Shift later members of the probe run back so no lookup stops early at the hole.
    for (std::size_t j = (i + 1) & mask_; slots_[j].key != 0; j = (j + 1) & mask_) {
      const std::size_t home = slot_of(slots_[j].key);
      if (((j - home) & mask_) >= ((j - i) & mask_)) {
        slots_[i] = slots_[j];
        i = j;
      }
    }
    slots_[i].key = 0;
    --size_;
  }
  std::size_t slot_of(std::uintptr_t key) const noexcept {
    return static_cast<std::size_t>(((key >> 8) * 0x9E3779B97F4A7C15ull) >> shift_);
  }
  [[gnu::noinline]] void grow() { rehash((mask_ + 1) * 2); }
  void rehash(std::size_t n) {
    std::vector<slot> old = std::move(slots_);
    slots_.assign(n, slot{});
    mask_ = n - 1;
    shift_ = 64 - static_cast<unsigned>(__builtin_ctzll(n));
    size_ = 0;
    for (const auto& s : old)
      if (s.key) insert(s.key, s.value);
  }
  std::vector<slot> slots_;
  std::size_t mask_ = 0;
  unsigned shift_ = 0;
  std::size_t size_ = 0;
};

}  // namespace gpumem::detail
