// The arena's physical map on a virtual upstream: which handle backs each granule, mapping and
// unmapping runs of handles, spares, kept mappings, and the window a request needs mapped.
#include <fmt/format.h>

#include <algorithm>

#include "arena.hpp"

namespace gpumem::detail {

// Each piece is one mapping; consecutive single-granule pieces go in one upstream call (one
// cuMemSetAccess for them all). Each call's granules are recorded as soon as it succeeds, so when
// a later call throws, `done` says how many pieces are mapped and accounted for.
void arena::map_pieces(std::size_t g0, const piece* pieces, std::size_t count, std::size_t& done) {
  std::vector<physical_handle> singles;
  std::size_t g = g0;
  const bool timed = opts_.remap_time_budget > 0;
  for (done = 0; done < count;) {
    std::size_t end = done + 1;
    const std::uint64_t t0 = timed ? now_ns() : 0;
    // A handle still mapped here (a kept mapping): mapped again without a driver call.
    const bool reused = pieces[done].granules == 1 && kept_[g] == pieces[done].h;
    if (reused) {
      forget_kept(g);
    } else if (pieces[done].granules == 1) {
      singles.clear();
      for (end = done; end < count && pieces[end].granules == 1 && kept_[g + (end - done)] != pieces[end].h; ++end) {
        drop_kept(g + (end - done));  // another handle's kept mapping: unmapped first
        singles.push_back(pieces[end].h);
      }
      up_.map_run(reinterpret_cast<void*>(granule_addr(g)), granule_, singles.data(), singles.size());
    } else {
      for (std::size_t k = 0; k < pieces[done].granules; ++k) drop_kept(g + k);
      up_.map(reinterpret_cast<void*>(granule_addr(g)), pieces[done].granules * granule_, pieces[done].h);
    }
    if (!reused) ++map_calls_;
    if (timed && !reused) {
      // Mapping a spare is the second half of a move; mapping new memory is growth, which any
      // allocator pays for. The call's time is split by granules between the two.
      std::size_t moved = 0, all = 0;
      for (std::size_t k = done; k < end; ++k) {
        all += pieces[k].granules;
        if (!pieces[k].grown) moved += pieces[k].granules;
      }
      if (moved) charge_remap((now_ns() - t0) * moved / all, moved);
    }
    const std::size_t from = g;
    for (; done < end; ++done) {
      if (pieces[done].alias) stream_ordered_moved_ += pieces[done].granules;
      if (pieces[done].granules == 1) home_[pieces[done].h.value] = g;
      for (std::size_t k = 0; k < pieces[done].granules; ++k, ++g) {
        granule_handle_[g] = pieces[done].h;
        mapped_bits_.set(g);
        handle_head_[g] = static_cast<std::uint32_t>(k);
        handle_granules_[g] = static_cast<std::uint32_t>(pieces[done].granules);
        idle_.insert(g);  // until the block over it is carved
        ++mapped_;
        ++maps_;
        if (!reused) ++driver_maps_;
      }
    }
    set_mapped(granule_addr(from), granule_addr(g), true);
  }
}

void arena::unmap_run(std::size_t g0, std::size_t g1, bool keep_mappings) {
  const bool keep = keep_mappings && std::all_of(handle_granules_.begin() + static_cast<std::ptrdiff_t>(g0),
                                                 handle_granules_.begin() + static_cast<std::ptrdiff_t>(g1),
                                                 [](std::uint32_t n) { return n == 1; });
  if (!keep) {
    up_.unmap(reinterpret_cast<void*>(granule_addr(g0)), (g1 - g0) * granule_);
    ++unmap_calls_;
  }
  for (std::size_t g = g0; g < g1; ++g) {
    if (handle_head_[g] == 0) add_spare({granule_handle_[g], handle_granules_[g]});
    idle_.erase(g);
    leave_granule(g, keep);
  }
  set_mapped(granule_addr(g0), granule_addr(g1), false);
}

void arena::leave_granule(std::size_t g, bool keep) {
  const physical_handle h = granule_handle_[g];
  if (auto home = home_.find(h.value); home != home_.end() && home->second == g) home_.erase(home);
  if (keep) {
    kept_[g] = h;
    kept_end_ = std::max(kept_end_, g + 1);
    ++kept_count_;
  } else {
    ++driver_unmaps_;
  }
  granule_handle_[g] = physical_handle{0};
  mapped_bits_.clear(g);
  handle_head_[g] = handle_granules_[g] = 0;
  --mapped_;
  ++unmaps_;
}

bool arena::take_kept(std::size_t t, std::size_t keep_lo, std::size_t keep_hi, bool from_idle, std::vector<piece>& got) {
  const physical_handle h = kept_[t];
  if (!h.value) return false;
  if (const std::size_t i = spare_index(h); i != SIZE_MAX) {
    take_spare_at(i, got);
    return true;
  }
  auto home = from_idle ? home_.find(h.value) : home_.end();
  if (home == home_.end()) return false;
  const std::size_t g = home->second;
  // Idle where it is (no busy byte: every free over it done, no retiring place) and not under the
  // request itself.
  if (granule_handle_[g] != h || handle_granules_[g] != 1 || busy_[g] || (g >= keep_lo && g < keep_hi)) return false;
  unmap_run(g, g + 1, true);  // kept mapped there in turn; the handle becomes the newest spare
  take_spare_at(spares_.size() - 1, got);
  return true;
}

std::size_t arena::spare_index(physical_handle h) const {
  for (std::size_t i = 0; i < spares_.size(); ++i)
    if (spares_[i].h == h) return i;
  return SIZE_MAX;
}

void arena::take_spare_at(std::size_t i, std::vector<piece>& got) {
  got.push_back(spares_[i]);
  remove_spare_at(i);
}

void arena::remove_spare_at(std::size_t i) {
  spare_granules_ -= spares_[i].granules;
  spares_[i] = spares_.back();
  spares_.pop_back();
  if (spares_.empty()) largest_spare_ = 0;
}

void arena::forget_kept(std::size_t g) {
  if (!kept_[g].value) return;
  kept_[g] = physical_handle{0};
  --kept_count_;
}

void arena::drop_kept(std::size_t g) {
  if (!kept_[g].value) return;
  up_.unmap(reinterpret_cast<void*>(granule_addr(g)), granule_);
  ++unmap_calls_;
  ++driver_unmaps_;  // the granule left its place earlier (counted in unmaps_ then)
  forget_kept(g);
}

void arena::drop_kept_of(physical_handle h) {
  for (std::size_t g = 0; g < kept_end_ && kept_count_; ++g)
    if (kept_[g] == h) drop_kept(g);
}

bool arena::handle_idle(std::size_t head) const {
  for (std::size_t g = head; g < head + handle_granules_[head]; ++g)
    if (busy_[g]) return false;
  return true;
}

// Handles a failed request had gathered: memory it created goes back to the upstream (a failure
// must not leave the pool holding what it grabbed on the way), spares stay spares.
void arena::give_back_pieces(const piece* begin, const piece* end) {
  for (const piece* p = begin; p != end; ++p) {
    if (p->grown) {
      up_.release_physical(p->h, p->granules * granule_);
      ++upstream_releases_;
    } else {
      keep_unmapped(*p);
    }
  }
}

void arena::keep_unmapped(const piece& p) {
  // A request that gathered a handle from a retiring place and then failed (a first attempt that
  // may not grow fails often) puts it back: the place was only marked, no driver call was made,
  // so it is its stream's free memory again. (A spare instead if a wait meanwhile unmapped it.)
  auto it = p.alias ? find_block(p.from) : blocks_.end();
  if (it == blocks_.end() || it->second.st != state::retiring || granule_handle_[granule_of(p.from)] != p.h)
    return add_spare(p);
  retiring_.erase(std::find(retiring_.begin(), retiring_.end(), p.from));
  retiring_granules_ -= p.granules;
  it->second.st = state::owned;  // every byte stays busy until the stream runs past `seq`
  run_add(it->first, it->second.size);
  make_free(it);
}

void arena::add_spare(const piece& p) {
  spares_.push_back({p.h, p.granules, false});  // mapped later, it is memory moved, not grown
  spare_granules_ += p.granules;
  largest_spare_ = std::max(largest_spare_, p.granules);
}

void arena::release_spare(std::size_t i) {
  drop_kept_of(spares_[i].h);
  // A place still retiring may map this handle (its owner was freed on another stream): once the
  // handle is released its value may name a new one, so that place must not end as a kept mapping.
  for (std::uintptr_t a : retiring_)
    if (granule_handle_[granule_of(a)] == spares_[i].h) released_under_.push_back(granule_of(a));
  up_.release_physical(spares_[i].h, spares_[i].granules * granule_);
  remove_spare_at(i);
  ++upstream_releases_;
}

bool arena::take_spare(std::size_t most, std::vector<piece>& got, std::size_t wanted_lo, std::size_t wanted_hi) {
  // A spare kept mapped in [wanted_lo, wanted_hi) is left alone: a later piece of the same run
  // takes it there at no cost. (Taking it here instead, rather than moving or growing, would cost
  // that piece a driver call and this one too.)
  const auto kept_lo = kept_.begin() + static_cast<std::ptrdiff_t>(std::min(wanted_lo, kept_end_));
  const auto kept_hi = kept_.begin() + static_cast<std::ptrdiff_t>(std::min(wanted_hi, kept_end_));
  auto wanted = [&](const piece& p) { return p.granules == 1 && std::find(kept_lo, kept_hi, p.h) != kept_hi; };
  // The first of the largest that fit. None is larger than largest_spare_: once one that large
  // is found, the rest need no look (by default every spare is one granule, and the pool asks
  // for one at a time while it moves memory: the whole list was walked per granule).
  const std::size_t enough = std::min(most, largest_spare_);
  std::size_t best = SIZE_MAX;
  for (std::size_t i = 0; i < spares_.size(); ++i)
    if (spares_[i].granules <= most && (best == SIZE_MAX || spares_[i].granules > spares_[best].granules) &&
        !wanted(spares_[i])) {
      best = i;
      if (spares_[i].granules == enough) break;
    }
  if (best == SIZE_MAX) return false;
  take_spare_at(best, got);
  return true;
}

bool arena::map_window(std::uintptr_t a, std::size_t n, stream_ref s, bool may_grow, std::string* why,
                       std::uintptr_t req_lo, std::uintptr_t req_hi) {
  if (req_hi == 0) req_lo = a, req_hi = a + n;
  const std::size_t g_lo = granule_of(a), g_hi = granule_of(a + n - 1) + 1;
  // Runs of missing granules: each lies in one unmapped block and is filled with handles adding
  // up to its length exactly, mapped in one go.
  struct run_need {
    std::size_t g0, count, first_piece;
  };
  std::vector<run_need> runs;
  for (std::size_t g = g_lo; g < g_hi; ++g) {
    if (granule_handle_[g].value) continue;
    if (!runs.empty() && runs.back().g0 + runs.back().count == g)
      ++runs.back().count;
    else
      runs.push_back({g, 1, 0});
  }
  if (runs.empty()) return true;
  // More than the device can hold, whatever is moved: fail before creating any of it. (Else a
  // request larger than the device — a size computed wrong — would create handles until the
  // device refused, and a second attempt would do it again.)
  // The test is what any success needs — the live bytes plus the granules to map — so memory
  // that could still be moved or waited for (idle, spare, freed on a stream still running) never
  // fails a request that fits.
  if (const std::size_t cap = up_.capacity_bytes()) {
    std::size_t missing = 0;
    for (const auto& r : runs) missing += r.count;
    if (allocated_ + missing * granule_ > cap) {
      set_why(why, fmt::format("the device holds {} B: with {} B live, {} B more cannot fit", cap, allocated_,
                               missing * granule_));
      return false;
    }
  }
  std::vector<piece> got;
  for (auto& r : runs) {
    r.first_piece = got.size();
    if (!take_physical(r.g0, r.count, g_lo, g_hi, s, may_grow, got, why)) {
      give_back_pieces(got.data(), got.data() + got.size());
      return false;
    }
  }
  for (std::size_t i = 0; i < runs.size(); ++i) {
    const std::size_t end = i + 1 < runs.size() ? runs[i + 1].first_piece : got.size();
    std::size_t done = 0;
    try {
      map_pieces(runs[i].g0, got.data() + runs[i].first_piece, end - runs[i].first_piece, done);
    } catch (...) {
      for (std::size_t k = runs[i].first_piece + done; k < got.size(); ++k) keep_unmapped(got[k]);
      throw;
    }
  }
  // Memory moved in stream order onto a granule the request covers only in part: the rest of that
  // granule is memory `s`'s queued work may still use at its old place, so it is `s`'s free memory
  // — reusable by `s` at once, by other streams only once `s` has run past the old place's frees.
  for (std::size_t i = 0; i < runs.size(); ++i) {
    const std::size_t end = i + 1 < runs.size() ? runs[i + 1].first_piece : got.size();
    std::uintptr_t pa = granule_addr(runs[i].g0);
    for (std::size_t k = runs[i].first_piece; k < end; pa += got[k].granules * granule_, ++k) {
      const piece& p = got[k];
      auto old = p.alias ? find_block(p.from) : blocks_.end();
      if (old == blocks_.end() || old->second.st != state::retiring || old->second.seq == 0) continue;
      const std::uintptr_t pe = pa + p.granules * granule_;
      if (pa < req_lo) hold_for(pa, std::min(pe, req_lo), s, old->second.seq);
      if (pe > req_hi) hold_for(std::max(pa, req_hi), pe, s, old->second.seq);
    }
  }
  return true;
}

// [x, y), ready mapped memory (or already `s`'s), becomes free memory owned by `s` until its
// clock passes `seq`.
void arena::hold_for(std::uintptr_t x, std::uintptr_t y, stream_ref s, std::uint64_t seq) {
  cut_at(x);
  cut_at(y);
  for (auto it = find_block(x); it != blocks_.end() && it->first < y;) {
    index_erase(it);
    block& b = it->second;
    if (b.st == state::ready) {
      add_busy(it->first, b.size, true);
      b.st = state::owned;
      b.stream = s;
      b.seq = seq;
    } else {
      b.seq = std::max(b.seq, seq);
    }
    const std::uintptr_t next_at = it->first + b.size;
    make_free(it);  // may merge with its neighbours, both s's now
    it = blocks_.lower_bound(next_at);
  }
}

}  // namespace gpumem::detail
