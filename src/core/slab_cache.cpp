#include "core/slab_cache.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>

namespace gpumem::detail {

slab_cache::slab_cache(arena& a, stream_clock& clock, std::size_t small_max)
    : arena_(a), clock_(clock), small_max_(small_max) {}

slab_cache::~slab_cache() = default;  // the arena gives every block back with its ranges

void slab_cache::list(slab* sl) {
  if (sl->listed) return;
  partial_[{sl->cls, sl->owner}].push_back(sl);
  sl->listed = true;
}

std::uintptr_t slab_cache::allocate(std::size_t cls, stream_ref s, bool may_grow, slab*& from) {
  auto& candidates = partial_[{cls, s}];
  while (!candidates.empty() && candidates.back()->free_slots.empty()) {
    candidates.back()->listed = false;
    candidates.pop_back();
  }
  slab* sl = nullptr;
  if (!candidates.empty()) {
    sl = candidates.back();
  } else {
    const std::size_t slot = size_class_bytes(cls);
    const std::size_t bytes = slab_bytes_for(slot);
    std::uintptr_t base = arena_.allocate(bytes, class_unit, s, may_grow);
    if (!base) return 0;
    auto owned = std::make_unique<slab>();
    sl = owned.get();
    sl->base = base;
    sl->bytes = bytes;
    sl->cls = cls;
    sl->slot_bytes = slot;
    sl->owner = s;
    sl->slots = static_cast<std::uint32_t>(bytes / slot);
    // Hand out low addresses first: pop from the back of a descending list.
    sl->free_slots.resize(sl->slots);
    for (std::uint32_t i = 0; i < sl->slots; ++i) sl->free_slots[i] = sl->slots - 1 - i;
    slabs_.emplace(base, std::move(owned));
    slab_bytes_ += bytes;
    partial_[{cls, s}].push_back(sl);
    sl->listed = true;
  }
  const std::uint32_t slot = sl->free_slots.back();
  sl->free_slots.pop_back();
  ++sl->live;
  from = sl;
  return sl->base + slot * sl->slot_bytes;
}

void slab_cache::return_slot(slab* sl, std::uint32_t slot) {
  sl->free_slots.push_back(slot);
  list(sl);
}

void slab_cache::deallocate(slab* sl, std::uintptr_t addr, stream_ref s, const std::vector<stream_ref>& also_on) {
  const auto slot = static_cast<std::uint32_t>((addr - sl->base) / sl->slot_bytes);
  --sl->live;
  bool other_streams = s != sl->owner;
  for (stream_ref u : also_on) other_streams |= u != sl->owner;
  if (!other_streams) {
    return_slot(sl, slot);
    return;
  }
  waiting_slot w{sl, slot, {clock_.note_free(s)}};
  for (stream_ref u : also_on)
    if (u != s) w.waits.push_back(clock_.note_free(u));
  ++sl->waiting;
  waiting_.push_back(std::move(w));
}

void slab_cache::promote() {
  for (std::size_t i = 0; i < waiting_.size();) {
    auto& w = waiting_[i];
    if (std::all_of(w.waits.begin(), w.waits.end(), [&](const stream_mark& m) { return clock_.met(m); })) {
      --w.sl->waiting;
      return_slot(w.sl, w.slot);
      waiting_[i] = std::move(waiting_.back());
      waiting_.pop_back();
    } else {
      ++i;
    }
  }
}

void slab_cache::disown(stream_ref s) {
  if (s == 0) return;
  for (auto& [base, sl] : slabs_) {
    if (sl->owner != s) continue;
    if (sl->listed) {
      auto& v = partial_[{sl->cls, s}];
      v.erase(std::find(v.begin(), v.end(), sl.get()));
      sl->listed = false;
    }
    sl->owner = 0;
    if (!sl->free_slots.empty()) list(sl.get());
  }
}

std::size_t slab_cache::release_empty() {
  std::size_t n = 0;
  for (auto it = slabs_.begin(); it != slabs_.end();) {
    slab* sl = it->second.get();
    if (sl->live || sl->waiting) {
      ++it;
      continue;
    }
    if (sl->listed) {
      auto& v = partial_[{sl->cls, sl->owner}];
      v.erase(std::find(v.begin(), v.end(), sl));
    }
    // Freed on the owner stream: the arena keeps it owned until that stream's work has run.
    arena_.deallocate(sl->base, sl->owner);
    slab_bytes_ -= sl->bytes;
    it = slabs_.erase(it);
    ++n;
  }
  return n;
}

bool slab_cache::is_free_slot(std::uintptr_t addr) const {
  for (const auto& [base, sl] : slabs_) {
    if (addr < base || addr >= base + sl->bytes) continue;
    if ((addr - base) % sl->slot_bytes) return false;
    const auto slot = static_cast<std::uint32_t>((addr - base) / sl->slot_bytes);
    if (std::find(sl->free_slots.begin(), sl->free_slots.end(), slot) != sl->free_slots.end()) return true;
    const slab* const here = sl.get();  // clang 14 cannot capture a structured binding
    return std::any_of(waiting_.begin(), waiting_.end(), [&](const waiting_slot& w) { return w.sl == here && w.slot == slot; });
  }
  return false;
}

void slab_cache::check() const {
  std::size_t bytes = 0;
  for (const auto& [base, sl] : slabs_) {
    bytes += sl->bytes;
    if (arena_.live_size(base) != sl->bytes) throw std::logic_error(fmt::format("slab {:#x} is not a live arena block of its size", base));
    if (sl->live + sl->waiting + sl->free_slots.size() != sl->slots)
      throw std::logic_error(fmt::format("slab {:#x}: live {} + waiting {} + free {} != slots {}", base, sl->live,
                                         sl->waiting, sl->free_slots.size(), sl->slots));
    std::vector<bool> seen(sl->slots);
    for (auto s : sl->free_slots) {
      if (s >= sl->slots || seen[s]) throw std::logic_error(fmt::format("slab {:#x}: free slot {} listed twice or out of range", base, s));
      seen[s] = true;
    }
  }
  if (bytes != slab_bytes_) throw std::logic_error("slab byte count is off");
}

}  // namespace gpumem::detail
