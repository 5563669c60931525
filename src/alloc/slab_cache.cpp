#include "slab_cache.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>

namespace gpumem::detail {

slab_cache::slab_cache(arena& a, stream_clock& clock, std::size_t small_max, bool granule_aligned)
    : arena_(a), clock_(clock), small_max_(small_max), granule_aligned_(granule_aligned && a.is_virtual()) {}

slab_cache::~slab_cache() = default;  // the arena gives every block back with its ranges

slab_shard& slab_cache::shard_for(stream_ref s) {
  auto& sh = shards_[s];
  if (!sh) {
    sh = std::make_unique<slab_shard>();
    sh->stream = s;
  }
  return *sh;
}

void slab_cache::unlist(slab_shard& sh, slab* sl) {
  if (!sl->listed) return;
  auto& v = sh.partial[sl->cls];
  v.erase(std::find(v.begin(), v.end(), sl));
  sl->listed = false;
}

void slab_cache::return_slot(slab* sl, std::uint32_t slot) {
  slab_shard& sh = *sl->shard.load(std::memory_order_relaxed);
  sl->free_slots.push_back(slot);
  if (!sl->listed) list_in(sh, sl);
  note_if_emptied(sh, sl);
}

std::uintptr_t slab_cache::allocate(std::size_t cls, stream_ref s, bool may_grow, slab*& from) {
  slab_shard& sh = shard_for(s);
  std::uintptr_t got = 0;
  {
    std::lock_guard lock(sh.m);
    take_free(sh, cls, 1, [&](std::uintptr_t a, slab* sl, std::uint32_t) {
      got = a;
      from = sl;
    });
  }
  if (got) return got;
  const std::size_t slot = size_class_bytes(cls);
  const std::size_t bytes = slab_bytes_for(slot);
  const std::size_t align = granule_aligned_ && bytes == arena_.granule_bytes() ? bytes : class_unit;
  std::uintptr_t base = arena_.allocate(bytes, align, s, may_grow, nullptr, true, /*slab=*/true);
  if (!base) return 0;
  auto owned = std::make_unique<slab>();
  slab* sl = owned.get();
  sl->base = base;
  sl->bytes = bytes;
  sl->cls = cls;
  sl->slot_bytes = slot;
  sl->owner = s;
  sl->shard.store(&sh, std::memory_order_relaxed);
  sl->slots = static_cast<std::uint32_t>(bytes / slot);
  // Hand out low addresses first: pop from the back of a descending list.
  sl->free_slots.resize(sl->slots);
  for (std::uint32_t i = 0; i < sl->slots; ++i) sl->free_slots[i] = sl->slots - 1 - i;
  slabs_.emplace(base, std::move(owned));
  slab_bytes_ += bytes;
  std::lock_guard lock(sh.m);
  list_in(sh, sl);
  take_free(sh, cls, 1, [&](std::uintptr_t a, slab* from_slab, std::uint32_t) {
    got = a;
    from = from_slab;
  });
  return got;
}

void slab_cache::deallocate(slab* sl, std::uintptr_t addr, stream_ref s, const std::vector<stream_ref>& also_on) {
  const std::uint32_t slot = sl->slot_of(addr);
  bool other_streams = s != sl->owner;
  for (stream_ref u : also_on) other_streams |= u != sl->owner;
  std::lock_guard lock(sl->shard.load(std::memory_order_relaxed)->m);
  --sl->live;
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
      {
        std::lock_guard lock(w.sl->shard.load(std::memory_order_relaxed)->m);
        --w.sl->waiting;
        return_slot(w.sl, w.slot);
      }
      waiting_[i] = std::move(waiting_.back());
      waiting_.pop_back();
    } else {
      ++i;
    }
  }
}

void slab_cache::disown(stream_ref s) {
  if (s == stream_ref{}) return;
  auto it = shards_.find(s);
  if (it == shards_.end()) return;
  slab_shard& from = *it->second;
  slab_shard& to = shard_for(stream_ref{});
  std::scoped_lock lock(from.m, to.m);
  for (auto& [base, sl] : slabs_) {
    if (sl->owner != s) continue;
    unlist(from, sl.get());
    if (sl->emptied) {
      from.emptied.erase(std::find(from.emptied.begin(), from.emptied.end(), sl.get()));
      sl->emptied = false;
    }
    sl->owner = {};
    sl->shard.store(&to, std::memory_order_relaxed);
    if (!sl->free_slots.empty()) list_in(to, sl.get());
  }
}

void slab_cache::release_slab(slab* sl) {
  arena_.deallocate(sl->base, sl->owner);
  slab_bytes_ -= sl->bytes;
  slabs_.erase(sl->base);
}

void slab_cache::release_emptied() {
  std::vector<slab*> out;
  for (auto& [s, sh] : shards_) {
    if (!sh->has_emptied.load(std::memory_order_relaxed)) continue;
    std::lock_guard lock(sh->m);
    for (slab* sl : sh->emptied) {
      sl->emptied = false;
      // Still empty, and not the last of its class with free slots.
      if (sl->empty() && sh->partial[sl->cls].size() > 1) {
        unlist(*sh, sl);
        out.push_back(sl);
      }
    }
    sh->emptied.clear();
    sh->has_emptied.store(false, std::memory_order_relaxed);
  }
  // Unlisted and empty: no front cache can reach them any more.
  for (slab* sl : out) release_slab(sl);
}

std::size_t slab_cache::release_empty() {
  std::size_t n = 0;
  for (auto it = slabs_.begin(); it != slabs_.end();) {
    slab* sl = it->second.get();
    {
      slab_shard& sh = *sl->shard.load(std::memory_order_relaxed);
      std::lock_guard lock(sh.m);
      if (sl->live || sl->waiting) {
        ++it;
        continue;
      }
      unlist(sh, sl);
      if (sl->emptied) {
        sh.emptied.erase(std::find(sh.emptied.begin(), sh.emptied.end(), sl));
        sl->emptied = false;
      }
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
    const auto slot = sl->slot_of(addr);
    {
      std::lock_guard lock(sl->shard.load(std::memory_order_relaxed)->m);
      if (std::find(sl->free_slots.begin(), sl->free_slots.end(), slot) != sl->free_slots.end()) return true;
    }
    const slab* const here = sl.get();  // clang 14 cannot capture a structured binding
    return std::any_of(waiting_.begin(), waiting_.end(), [&](const waiting_slot& w) { return w.sl == here && w.slot == slot; });
  }
  return false;
}

void slab_cache::check() const {
  // Every shard at once, so no slot moves between a slab's figures and a front cache meanwhile.
  std::vector<std::unique_lock<spin_lock>> held;
  for (const auto& [s, sh] : shards_) held.emplace_back(sh->m);
  std::size_t bytes = 0;
  for (const auto& [base, sl] : slabs_) {
    bytes += sl->bytes;
    if (arena_.live_size(base) != sl->bytes) throw std::logic_error(fmt::format("slab {:#x} is not a live arena block of its size", base));
    if (sl->live + sl->waiting + sl->free_slots.size() != sl->slots)
      throw std::logic_error(fmt::format("slab {:#x}: live {} + waiting {} + free {} != slots {}", base, sl->live,
                                         sl->waiting, sl->free_slots.size(), sl->slots));
    const slab_shard* sh = sl->shard.load(std::memory_order_relaxed);
    if (!sh || sh->stream != sl->owner) throw std::logic_error(fmt::format("slab {:#x} is not in its owner's shard", base));
    const bool in_list = sl->cls < sh->partial.size() &&
                         std::find(sh->partial[sl->cls].begin(), sh->partial[sl->cls].end(), sl.get()) !=
                             sh->partial[sl->cls].end();
    if (in_list != sl->listed) throw std::logic_error(fmt::format("slab {:#x}: listed flag is off", base));
    std::vector<bool> seen(sl->slots);
    for (auto s : sl->free_slots) {
      if (s >= sl->slots || seen[s]) throw std::logic_error(fmt::format("slab {:#x}: free slot {} listed twice or out of range", base, s));
      seen[s] = true;
    }
  }
  if (bytes != slab_bytes_) throw std::logic_error("slab byte count is off");
}

}  // namespace gpumem::detail
