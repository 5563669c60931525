// Where the arena finds granules for a window it must map: spares, idle granules harvested from
// elsewhere, memory moved in stream order (with retiring places), oversized handles given back,
// and only then growth; with the remap time budget that rations moves.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <optional>

#include "arena.hpp"

namespace gpumem::detail {

std::size_t arena::idle_budget_granules() const {
  if (opts_.idle_budget <= 0) return 0;
  return static_cast<std::size_t>(opts_.idle_budget * double(allocated_)) / granule_;
}

// The budget's clock. A modeled cost above what a move measured is time the job would have spent
// on a GPU, so it counts as time passed too: else the simulator, whose moves take no time, would
// see a job that never gives the budget time to refill.
std::uint64_t arena::now_ns() const {
  const std::uint64_t t =
      opts_.remap_clock_ns
          ? opts_.remap_clock_ns()
          : static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                           std::chrono::steady_clock::now().time_since_epoch())
                                           .count());
  return t + remap_modeled_extra_ns_;
}

// The bucket fills at remap_time_budget ns per ns that passes, up to one second's worth: a job may
// spend what it saved over the last second at once (a step's reshaping comes in bursts), not what
// it saved over an idle hour. A move is allowed while the bucket is not in debt, and its cost is
// known only after it ran, so one move may overdraw; the next waits until time has repaid it.
bool arena::remap_budget_spent() {
  if (opts_.remap_time_budget <= 0) return false;
  const std::uint64_t now = now_ns();
  if (now > remap_refilled_at_) {
    const double cap = opts_.remap_time_budget * 1e9;
    remap_tokens_ns_ = std::min(cap, remap_tokens_ns_ + opts_.remap_time_budget * double(now - remap_refilled_at_));
    remap_refilled_at_ = now;
  }
  return remap_tokens_ns_ < 0;
}

bool arena::remap_allowed() {
  if (!remap_budget_spent()) return true;
  ++remaps_deferred_;
  return false;
}

void arena::charge_remap(std::uint64_t ns, std::size_t granules) {
  if (opts_.remap_time_budget <= 0 || granules == 0) return;
  const double cost = std::max(double(ns), opts_.remap_cost_ns_per_granule * double(granules));
  remap_modeled_extra_ns_ += static_cast<std::uint64_t>(cost - double(ns));
  remap_tokens_ns_ -= cost;
  remap_charged_ns_ += static_cast<std::uint64_t>(cost);
}

std::size_t arena::top_idle_handle(std::size_t most, bool larger, std::size_t keep_lo, std::size_t keep_hi) const {
  for (std::size_t g = idle_.last_below(granule_handle_.size()); g != granule_set::none;) {
    const std::size_t head = g - handle_head_[g], n = handle_granules_[g];
    const bool kept = head < keep_hi && head + n > keep_lo;
    if ((larger ? n > most : n <= most) && !kept && handle_idle(head)) return head;
    g = idle_.last_below(head);  // the rest of this handle is no better
  }
  return SIZE_MAX;
}

// The victim is the highest idle handle outside the window, with the idle handles right below
// it: contiguous idle granules lie in one mapped ready block, so the run is one unmap call. (Other
// orders, lowest first, least recently idle first or smallest hole first, reserve no less.)
// Within the idle budget only the idle granules above it may go.
std::size_t arena::harvest(std::size_t want, std::size_t keep_lo, std::size_t keep_hi, bool within_budget,
                           bool keep_mappings) {
  if (idle_.empty() || want == 0) return 0;
  if (within_budget && opts_.keep_idle) return 0;
  if (within_budget) {
    const std::size_t keep = idle_budget_granules();
    if (idle_.size() <= keep) return 0;
    want = std::min(want, idle_.size() - keep);
  }
  const std::size_t top = top_idle_handle(want, false, keep_lo, keep_hi);
  if (top == SIZE_MAX) return 0;
  std::size_t g0 = top, g1 = top + handle_granules_[top];
  while (g0 > 0 && granule_handle_[g0 - 1].value) {
    const std::size_t head = g0 - 1 - handle_head_[g0 - 1], n = handle_granules_[head];
    if (g1 - g0 + n > want || (head < keep_hi && g0 > keep_lo) || !handle_idle(head)) break;
    g0 = head;
  }
  const std::uint64_t t0 = opts_.remap_time_budget > 0 ? now_ns() : 0;
  // Kept mapped or not, the budget is charged for this half of the move as before: it rations
  // moves, and what a kept mapping saves shows in the driver counts, not in the budget.
  unmap_run(g0, g1, keep_mappings);
  if (opts_.remap_time_budget > 0) charge_remap(now_ns() - t0, g1 - g0);
  return g1 - g0;
}

std::size_t arena::move_pending(std::size_t want, std::size_t keep_lo, std::size_t keep_hi, stream_ref s,
                                bool within_budget, std::vector<piece>& got) {
  if (!opts_.stream_ordered_moves || want == 0 || (within_budget && opts_.keep_idle)) return 0;
  auto mine = owned_.find(s);
  if (mine == owned_.end()) return 0;
  // The stream's largest free blocks first (by size, then address, from the top): a handle all
  // free for it most likely lies under one. A bounded look: this runs before every growth.
  std::vector<std::pair<std::size_t, std::uintptr_t>> largest;
  for_each_owned(mine->second, [&](std::uintptr_t addr, const block& b) { largest.emplace_back(b.size, addr); });
  const auto looked = std::min<std::size_t>(largest.size(), 32);
  std::partial_sort(largest.begin(), largest.begin() + static_cast<std::ptrdiff_t>(looked), largest.end(),
                    std::greater<>());
  for (auto c = largest.begin(); c != largest.begin() + static_cast<std::ptrdiff_t>(looked); ++c) {
    const std::uintptr_t end = c->second + c->first;
    for (std::size_t g = granule_of(c->second); g < granule_handle_.size() && granule_addr(g) < end;) {
      if (!granule_handle_[g].value) {
        ++g;
        continue;
      }
      const std::size_t head = g - handle_head_[g], n = handle_granules_[head];
      const bool kept = head < keep_hi && head + n > keep_lo;
      if (n <= want && !kept && free_for(head, s)) {
        // Within the idle budget the pool keeps that share of live memory cached, as harvest does.
        if (within_budget && (reserved_bytes() - allocated_) / granule_ < idle_budget_granules() + n) return 0;
        const piece p{granule_handle_[head], n, false, true, granule_addr(head)};
        retire(head, head + n, s);
        got.push_back(p);
        return n;
      }
      g = head + n;
    }
  }
  return 0;
}

bool arena::free_for(std::size_t head, stream_ref s) const {
  const std::uintptr_t a = granule_addr(head), e = granule_addr(head + handle_granules_[head]);
  for (auto b = std::prev(blocks_.upper_bound(a)); b != blocks_.end() && b->first < e; ++b) {
    const block& x = b->second;
    if (x.st == state::ready ? !x.mapped : !(x.st == state::owned && x.stream == s)) return false;
  }
  return true;
}

// The blocks over [g0, g1) — ready, or owned by `s` — become one retiring block, out of every
// index and run; blocks reaching past either end are split there and keep their outer part.
void arena::retire(std::size_t g0, std::size_t g1, stream_ref s) {
  const std::uintptr_t a = granule_addr(g0), e = granule_addr(g1);
  cut_at(a);
  cut_at(e);
  auto it = find_block(a);
  const std::uint32_t segment = it->second.segment;
  std::uint64_t seq = 0;
  while (it != blocks_.end() && it->first < e) {
    index_erase(it);
    if (it->second.st == state::ready) add_busy(it->first, it->second.size, true);  // no one may take it now
    else seq = std::max(seq, it->second.seq);
    it = erase_block(it);
  }
  emplace_block_before(it, a, block{e - a, segment, state::retiring, true, s, seq, {}});
  run_remove(a, e - a);
  retiring_.push_back(a);
  retiring_granules_ += g1 - g0;
}

// The stream ran past every free at this place: unmapped (its handle lives at its new place), and
// ready unmapped memory again. The unmap is the second half of a move, charged to the remap time
// budget as harvest's is.
void arena::finish_retiring(block_map::iterator it) {
  const std::uintptr_t a = it->first;
  const std::size_t g0 = granule_of(a), g1 = granule_of(a + it->second.size);
  // A single-granule handle still in the pool (mapped at its new place, or a spare) stays mapped
  // here as a kept mapping: a later request here takes it back with no driver call.
  auto alive = [&](physical_handle h) { return home_.count(h.value) || spare_index(h) != SIZE_MAX; };
  const auto orphan = std::find(released_under_.begin(), released_under_.end(), g0);
  const bool released = orphan != released_under_.end();
  if (released) released_under_.erase(orphan);
  const bool keep = !released && handle_granules_[g0] == 1 && g1 == g0 + 1 && alive(granule_handle_[g0]);
  if (!keep) {
    const std::uint64_t t0 = opts_.remap_time_budget > 0 ? now_ns() : 0;
    up_.unmap(reinterpret_cast<void*>(a), (g1 - g0) * granule_);
    if (opts_.remap_time_budget > 0) charge_remap(now_ns() - t0, g1 - g0);
    ++unmap_calls_;
  }
  for (std::size_t g = g0; g < g1; ++g) leave_granule(g, keep);
  retiring_granules_ -= g1 - g0;
  add_busy(a, it->second.size, false);  // unmapped now: not idle
  it->second.st = state::ready;
  it->second.mapped = false;
  it->second.stream = {};
  it->second.seq = 0;
  run_add(a, it->second.size);
  make_free(it);
}

bool arena::release_oversized(std::size_t most, std::size_t keep_lo, std::size_t keep_hi, bool within_budget) {
  for (std::size_t i = 0; i < spares_.size(); ++i)
    if (spares_[i].granules > most) {
      release_spare(i);
      return true;
    }
  if (within_budget && opts_.keep_idle) return false;
  const std::size_t head = top_idle_handle(most, true, keep_lo, keep_hi);
  if (head == SIZE_MAX) return false;
  const std::size_t n = handle_granules_[head];
  if (within_budget && idle_.size() < idle_budget_granules() + n) return false;
  unmap_run(head, head + n);
  release_spare(spares_.size() - 1);
  return true;
}

bool arena::take_physical(std::size_t g0, std::size_t count, std::size_t keep_lo, std::size_t keep_hi, stream_ref s,
                          bool may_grow, std::vector<piece>& got, std::string* why) {
  bool covered = false, waited = false;
  std::size_t have = 0, most_new = max_handle_granules_;  // have: granules in got[first..]
  const std::size_t first = got.size();
  std::size_t earlier = 0;  // granules taken for the window's earlier runs
  for (const auto& p : got) earlier += p.granules;
  auto fail = [&](std::string text) {
    give_back_pieces(got.data() + first, got.data() + got.size());
    got.resize(first);
    set_why(why, std::move(text));
    return false;
  };
  while (have < count) {
    const std::size_t rest = count - have;
    const std::size_t taken = earlier + have;  // taken for this window: reserved, neither mapped nor spare
    const bool within_budget = !past_ceiling(taken + rest);
    // The handle still mapped where the next piece lands, if it is a spare or idle elsewhere: a
    // move with no driver call, whatever the remap time budget says (it rations driver time). Idle
    // memory the idle budget keeps in place stays there (else the place it leaves grows later).
    const bool idle_may_move = !within_budget || (!opts_.keep_idle && idle_.size() > idle_budget_granules());
    if (take_kept(g0 + have, keep_lo, keep_hi, idle_may_move, got)) {
      have += got.back().granules;
      continue;
    }
    if (take_spare(rest, got, g0 + have + 1, g0 + count)) {
      have += got.back().granules;
      continue;
    }
    // Same physical memory, mapped where it is needed now: no growth, no copy. (Unless the
    // remap time budget is spent: then growth first, and moves only when growing fails.) Within
    // the idle budget while growing stays under the reserve ceiling; past it, whatever is idle.
    const bool may_move = remap_allowed();
    if (may_move && harvest(rest, keep_lo, keep_hi, within_budget)) continue;
    if (!covered) {
      covered = true;
      clock_.cover_all();
      if (clock_.poll()) {
        promote();
        continue;
      }
    }
    // Memory this stream freed whose work is still queued: busy for every other stream, but this
    // request's work runs after it — map it here too, and let its old place retire.
    if (may_move && move_pending(rest, keep_lo, keep_hi, s, within_budget, got)) {
      have += got.back().granules;
      continue;
    }
    if (!may_grow) return fail("growth needed");
    // Idle memory above the budget that is only in handles too large for this run: give one back
    // rather than grow beside it.
    if (release_oversized(rest, keep_lo, keep_hi, within_budget)) continue;
    // Memory freed on streams still running before the free is busy: it cannot be unmapped while
    // their work may touch it. Waiting for them (the host only) makes it idle, to be moved here.
    if (opts_.wait_before_grow && !opts_.keep_idle && !waited && clock_.has_pending()) {
      waited = true;
      if (clock_.wait_all()) {
        promote();
        continue;
      }
    }
    const std::size_t n = std::min(rest, most_new);
    // Handles already taken for this window are reserved too, though neither mapped nor spare.
    const bool over_limit = reserved_bytes() + (taken + n) * granule_ > opts_.max_reserved_bytes;
    std::optional<physical_handle> h;
    if (!over_limit) {
      h = up_.create_physical(n * granule_);
      ++upstream_calls_;
    }
    if (h) {
      got.push_back({*h, n, true});
      have += n;
      continue;
    }
    if (n > 1) {  // the device (or the limit) may still have room for smaller handles
      most_new = 1;
      continue;
    }
    // No growth: the idle granules the budget kept come before waiting and failing.
    if (harvest(rest, keep_lo, keep_hi, false)) continue;
    if (release_oversized(rest, keep_lo, keep_hi, false)) continue;
    if (move_pending(rest, keep_lo, keep_hi, s, false, got)) {
      have += got.back().granules;
      continue;
    }
    if (!waited) {
      waited = true;
      if (clock_.wait_all()) {
        promote();
        continue;
      }
    }
    return fail(over_limit ? "the pool's limit (max_reserved_bytes) would be passed"
                           : fmt::format("upstream {} refused {} B of physical memory", up_.name(), granule_));
  }
  return true;
}

}  // namespace gpumem::detail
