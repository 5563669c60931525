#include "live_block_index.hpp"

#include <iterator>
#include <utility>

namespace gpumem {

std::optional<live_block_index::handle> live_block_index::insert(std::uintptr_t addr, std::size_t bytes, origin from,
                                                                 block* overlapped) {
  const std::uintptr_t end = addr + bytes;
  const auto next = blocks_.lower_bound(addr);  // first block starting at or after addr
  auto clash = blocks_.end();
  if (next != blocks_.end() && next->first < end) clash = next;
  if (next != blocks_.begin() && std::prev(next)->second.end > addr) clash = std::prev(next);
  if (clash != blocks_.end()) {
    if (overlapped) *overlapped = block{clash->first, clash->second.end - clash->first, clash->second.from};
    return std::nullopt;
  }
  if (spare_nodes_.empty()) return blocks_.emplace_hint(next, addr, entry{end, from});
  map::node_type node = std::move(spare_nodes_.back());
  spare_nodes_.pop_back();
  node.key() = addr;
  node.mapped() = entry{end, from};
  return blocks_.insert(next, std::move(node));
}

void live_block_index::erase(handle h) { spare_nodes_.push_back(blocks_.extract(h)); }

}  // namespace gpumem
