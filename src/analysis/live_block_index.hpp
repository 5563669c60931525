#pragma once
// The live blocks a soak has been handed, by start address, for its overlap check: a new block
// must not overlap any live one. Blocks in the index never overlap each other (an overlapping one
// is reported and left out), so comparing with the two neighbours by address is a check against
// all of them: O(log n).
//
// It runs on every allocation of a 10^8-op soak, so it allocates nothing in steady state: the map
// nodes of erased blocks are kept (std::map::extract) and reused for the next insertions; and a
// block is erased through the handle its insertion returned, with no second search.
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <vector>

namespace gpumem {

class live_block_index {
 public:
  // Who handed a block out: for describing an overlap.
  struct origin {
    std::uint64_t row = 0;
    std::size_t pass = 0;
  };
  struct block {
    std::uintptr_t addr = 0;
    std::size_t bytes = 0;
    origin from;
  };


 private:
  struct entry {
    std::uintptr_t end;
    origin from;
  };
  using map = std::map<std::uintptr_t, entry>;

 public:
  // A block in the index; valid until that block is erased.
  using handle = map::iterator;

  // Adds [addr, addr + bytes) (bytes > 0) and returns its handle, unless it overlaps a block
  // already in: then adds nothing, returns nullopt and, if `overlapped` is given, stores that block.
  std::optional<handle> insert(std::uintptr_t addr, std::size_t bytes, origin from, block* overlapped = nullptr);
  void erase(handle h);
  std::size_t size() const noexcept { return blocks_.size(); }

 private:
  map blocks_;
  std::vector<map::node_type> spare_nodes_;
};

}  // namespace gpumem
