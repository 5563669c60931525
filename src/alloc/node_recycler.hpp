#pragma once
// Tree nodes for the arena's indexes, kept for reuse. Every split, carve and coalesce allocates or
// frees a node of the arena's std::map / std::set indexes, and the heap's new and delete for them
// would be a large share of the pool's instructions.
// A node freed here goes on a free list of its size and is handed out again at the cost of a
// pointer swap; the lists go back to the heap when the recycler is destroyed — after the
// containers using it (declare it before them), which give every node back as they go.
// Not thread-safe: the arena is used under the pool's lock. Under AddressSanitizer nodes go straight
// to the heap, so a use of a freed node is still caught.
#include <cstddef>
#include <functional>
#include <map>
#include <new>
#include <set>
#include <utility>

namespace gpumem::detail {

class node_recycler {
 public:
#if defined(__SANITIZE_ADDRESS__)
  static constexpr bool recycles = false;
#else
  static constexpr bool recycles = true;
#endif
  node_recycler() = default;
  node_recycler(const node_recycler&) = delete;
  node_recycler& operator=(const node_recycler&) = delete;
  ~node_recycler() {
    for (free_node*& head : free_)
      while (head) ::operator delete(std::exchange(head, head->next), std::align_val_t{line});
  }

  void* take(std::size_t bytes) {
    const std::size_t k = slot_of(bytes);
    if (!recycles || k >= slots) return ::operator new(bytes);
    if (!free_[k]) return ::operator new((k + 1) * line, std::align_val_t{line});
    return std::exchange(free_[k], free_[k]->next);
  }
  void give(void* p, std::size_t bytes) noexcept {
    const std::size_t k = slot_of(bytes);
    if (!recycles || k >= slots) return ::operator delete(p);
    free_[k] = ::new (p) free_node{free_[k]};
  }

 private:
  struct free_node {
    free_node* next;
  };
  // Nodes start on a cache line and their sizes round up to whole lines. A tree walk reads a node's
  // links and key, its first 40 bytes: at operator new's 16-byte alignment a node could have them
  // across two lines, so a level of the walk waited for two loads, not one; a block's node (112 B,
  // rounded to 128) also keeps its size, state and stream on the first line, beside the key.
  static constexpr std::size_t line = 64;
  static constexpr std::size_t slots = 4;  // nodes up to 256 B; larger ones use the heap directly
  static constexpr std::size_t slot_of(std::size_t bytes) noexcept { return (bytes + line - 1) / line - 1; }
  free_node* free_[slots] = {};
};

// A std::allocator-shaped handle on a node_recycler for node-based containers: single objects
// come from the recycler, arrays (and a default-constructed allocator's requests) from the heap.
template <class T>
struct recycled {
  using value_type = T;
  static_assert(alignof(T) <= __STDCPP_DEFAULT_NEW_ALIGNMENT__, "a recycled node needs no more than new's alignment");

  node_recycler* r = nullptr;
  recycled() noexcept = default;
  explicit recycled(node_recycler& x) noexcept : r(&x) {}
  template <class U>
  recycled(const recycled<U>& o) noexcept : r(o.r) {}  // NOLINT: rebinding converts implicitly

  T* allocate(std::size_t n) {
    if (n == 1 && r) return static_cast<T*>(r->take(sizeof(T)));
    return static_cast<T*>(::operator new(n * sizeof(T)));
  }
  void deallocate(T* p, std::size_t n) noexcept {
    if (n == 1 && r) return r->give(p, sizeof(T));
    ::operator delete(p);
  }
  template <class U>
  friend bool operator==(const recycled& a, const recycled<U>& b) noexcept {
    return a.r == b.r;
  }
};

// The ordered containers on it: constructed with recycled<...>(the recycler).
template <class K, class V>
using recycled_map = std::map<K, V, std::less<K>, recycled<std::pair<const K, V>>>;
template <class K>
using recycled_set = std::set<K, std::less<K>, recycled<K>>;

}  // namespace gpumem::detail
