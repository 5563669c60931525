// The step plan's place in the pool (step_plan.hpp): what the arena serves is recorded, a step
// found is laid out and its region taken from the arena, planned blocks are freed, and the region
// goes back when a plan has drained; stretches are kept and taken up (stretch_library.hpp).
#include <mutex>

#include "pool_impl.hpp"

namespace gpumem {

namespace {
// The most a plan's region may be over its step's peak live bytes when no reserve ceiling is set.
constexpr double default_plan_ceiling = 1.03;
}  // namespace

void pool::impl::free_direct(detail::front_cache& fc, std::uint32_t i, std::size_t bytes, stream_ref s) noexcept {
  const detail::block_rec& r = fc.recs[i];
  const std::uintptr_t a = r.addr;
  const detail::live_entry e = r.entry();
  const bool planned = r.slot != 0;
  fc.live_bytes -= bytes;
  account(fc, -static_cast<std::ptrdiff_t>(bytes));
  fc.forget(i);
  if (planned && plan_shared) {
    fc.lock.owner_unlock();
    std::lock_guard lock(m);
    if (plan.release(a, s)) return_plan_region_if_drained();
    ++st.deallocations;
    note_reserved();
    return;
  }
  if (planned) {
    // Its place is free again for the plan's next block on this stream: no lock but the owner's.
    const bool drained = plan.release(a, s);
    ++fc.fast_frees;
    fc.lock.owner_unlock();
    if (drained) {
      std::lock_guard lock(m);
      detail::front_guard flock(fc.lock, true);
      return_plan_region_if_drained();
      note_reserved();
    }
    return;
  }
  in_transit_bytes.fetch_add(e.block_bytes, std::memory_order_relaxed);
  fc.lock.owner_unlock();
  std::lock_guard lock(m);
  in_transit_bytes.fetch_sub(e.block_bytes, std::memory_order_relaxed);
  {
    detail::front_guard flock(fc.lock, true);
    plan.record_free(a);
    if (stretches.record_free(a)) stretch_ended(fc);
  }
  give_back(a, e, s);
  ++st.deallocations;
  note_reserved();
}

double pool::impl::plan_bound() const {
  return opts.reserve_ceiling > 0 ? opts.reserve_ceiling : default_plan_ceiling;
}

void pool::impl::reject_plan() {
  // Look again after a while, less often each time.
  plan_skip = plan.step_requests() << std::min<std::uint32_t>(plan_rejections++, 6);
  plan.drop();
}

void pool::impl::plan_saw_alloc(std::uintptr_t a, std::size_t size, std::size_t alignment, stream_ref s) {
  if (!plan.following() && plan.state() != detail::step_plan::phase::draining &&
      stretches.record_alloc(a, size, alignment, s))
    stretch_unmaps_mark = arena.unmaps();
  if (plan.state() == detail::step_plan::phase::laid_out) return plan.count_alloc();
  if (!plan.recording()) return;
  if (plan_skip) {
    --plan_skip;
    return;
  }
  plan.record_alloc(a, size, alignment, s);
  if (plan.step_ready()) lay_out_step();
}

void pool::impl::lay_out_step() {
  // A step whose layout was over the ceiling before is found again (a partial repeat of a job whose
  // batches vary): it would be again, and laying it out is the costly part.
  const std::uint64_t signature = plan.step_signature();
  if (refused_steps.has(signature, plan_bound())) return reject_plan();
  std::size_t peak = 0;
  const std::size_t bytes = plan.lay_out(peak);
  if (!bytes || static_cast<double>(bytes) > plan_bound() * static_cast<double>(peak)) {
    // The step's layout is not within the ceiling (its shapes vary too much to sit still without
    // more memory): the arena goes on moving memory.
    refused_steps.add(signature, plan_bound());
    return reject_plan();
  }
  plan_moves_mark = arena.maps() + arena.unmaps();
  plan_installs_mark = plan.plans_made();
}

bool pool::impl::install_plan(detail::front_cache& fc) {
  if (arena.maps() + arena.unmaps() == plan_moves_mark && plan.plans_made() == plan_installs_mark) {
    // A whole step went by on the arena without a granule mapped or unmapped (nor a stretch's
    // layout keeping it still): the job has settled without a plan. Large blocks go back to the
    // front caches, which serve a repeated shape faster than any layout.
    plan.drop();
    plan_direct = false;
    plan_settled = true;
    return false;
  }
  if (take_region(fc)) {
    plan_rejections = 0;
    return true;
  }
  reject_plan();
  return false;
}

bool pool::impl::take_stretch(detail::front_cache& fc, std::size_t size, std::size_t alignment, stream_ref s) {
  if (plan_shared) return false;
  if (plan.step_ready()) lay_out_step();  // a step the job repeats comes first: it is followed for good
  // (A step laid out and waiting for its start waits on through the stretch.)
  const auto state = plan.state();
  if ((state != detail::step_plan::phase::recording && state != detail::step_plan::phase::laid_out) ||
      stretches.into_stretch() > detail::stretch_library::take_within)
    return false;
  const detail::kept_stretch* k = stretches.find(size, alignment, s);
  if (!k) return false;
  // A step laid out whose start falls within the stretch: the step is taken up there instead.
  if (state == detail::step_plan::phase::laid_out && plan.requests_to_install() <= k->entries.size()) return false;
  plan.follow_once(k->entries, k->stream);
  if (!take_region(fc)) {
    // No room beside what is live now: the arena serves the stretch this time.
    plan.unfollow();
    return false;
  }
  stretches.forget_recording();
  stretch_taken = {k->id, plan.hits(), plan.misses()};
  return true;
}

// A stretch ended (nothing recorded is live): kept if the arena moved memory for it.
void pool::impl::stretch_ended(detail::front_cache& fc) {
  if (arena.unmaps() == stretch_unmaps_mark || plan_shared) return;
  const std::size_t peak = std::max(fc.peak_live, shared_peak.load(std::memory_order_relaxed));
  stretches.keep(plan_bound() * static_cast<double>(peak));
}

// The plan's region from the arena, where the plan's next request is (the step's quietest moment,
// or a stretch's start): within the reserve ceiling beside what is live, or not at all.
bool pool::impl::take_region(detail::front_cache& fc) {
  // The last step's memory is free by now, most of it owned by the stream that freed it: once
  // ready it can be moved under the region rather than the region growing beside it.
  clock.cover_all();
  promote_ready();
  const std::size_t bytes = align_up(plan.extent_planned(), granule);
  // Reserved after: the region beside the granules live blocks hold (slabs, blocks of the step in
  // progress). Over the ceiling, the plan would buy its stillness with memory: the arena goes on.
  const std::size_t peak = std::max(fc.peak_live, shared_peak.load(std::memory_order_relaxed));
  const double most = plan_bound() * static_cast<double>(peak);
  // Small blocks the front cache keeps pin slabs where the region could lie: they go back, and
  // the slabs left empty with them (as settle does, once per plan).
  flush_front(fc);
  slabs.release_empty();
  if (static_cast<double>(bytes + arena.live_granule_bytes()) > most) return false;
  if (opts.reserve_ceiling > 0) arena.set_reserve_ceiling(ceiling_for(fc, bytes));
  std::uintptr_t region = arena.allocate(bytes, granule, plan.stream(), false);
  if (!region) {
    // Idle memory alone does not make the region (slabs and the blocks still live hold parts of
    // granules): it grows where the fewest granules are missing, and idle granules past the
    // ceiling go back after.
    region = arena.allocate(bytes, granule, plan.stream(), true);
    if (region && static_cast<double>(arena.reserved_bytes()) > most) arena.release(granule);
  }
  if (!region) {
    // Growing failed (the device is full): idle granules go back first, so the region grows into
    // what they held.
    arena.release(granule);
    region = arena.allocate(bytes, granule, plan.stream(), true);
  }
  if (!region) return false;
  plan.install(region);
  note_reserved();
  return true;
}

void pool::impl::plan_give_back(std::uintptr_t a, stream_ref s, const std::vector<stream_ref>& also) {
  detail::all_fronts_locked held(fronts);
  if (plan.release(a, s, also)) return_plan_region_if_drained();
}

void pool::impl::return_plan_region_if_drained() {
  if (!plan.region() || !plan.drained()) return;
  if (plan.following_once())  // followed, or mostly missed: a first request other stretches share
    stretches.judge(stretch_taken.id, plan.hits() - stretch_taken.hits >= plan.misses() - stretch_taken.misses);
  arena.deallocate(plan.region(), plan.stream(), plan.other_streams());
  plan.region_returned();
}

void pool::impl::share_planning() {
  // From now on every touch of the plan is under m (allocate_slow places, free_direct releases).
  plan_shared = true;
}

}  // namespace gpumem
