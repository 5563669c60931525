// The pool's construction, and the calls that maintain it: record_use, release_stream, trim and
// settle.
#include <fmt/format.h>

#include <algorithm>
#include <mutex>
#include <stdexcept>

#include "gpumem/detail/pool_tuning.hpp"

#include "pool_impl.hpp"

namespace gpumem {

namespace {

// pool_tuning::max_handle_bytes, 0 resolved by the policy.
std::size_t handle_bytes_for(const detail::pool_config& o) {
  if (o.max_handle_bytes) return o.max_handle_bytes;
  return o.grow_before_reclaim ? std::size_t{32} << 20 : 0;
}
// Whether slabs get their own half of the address range (arena_options::slab_zone): growing
// first, where the pool keeps its slabs for good. Carved by best fit, a slab lands in the
// smallest hole that holds it (between two large blocks of the step at hand) and stays there when
// they are freed, splitting the run they leave, so the next pass's large blocks no longer fit
// where the first pass's did and the pool grows. Apart, as PyTorch keeps its small blocks in
// segments of their own, slabs split nothing. Not by default: the tight policy gives empty slabs
// back and moves idle granules, and there a half of its own made it move more memory. Not with an
// initial reserve either: the reserve is mapped at the bottom of the range, and slabs placed
// above it would grow past it.
bool slab_zone_for(const detail::pool_config& o) { return o.grow_before_reclaim && o.initial_reserve_bytes == 0; }

}  // namespace

pool::impl::impl(upstream& u, ordering& o, const detail::pool_config& op)
    : opts(op),
      up(u),
      ord(o),
      granule(u.granularity()),
      small_max(std::min(op.small_max_bytes, std::size_t{1} << 20)),
      id(detail::new_pool_id()),
      bins_enabled(op.front_cache),
      zero_on_free(op.zero_on_free),
      fast_free_id(op.front_cache && !op.zero_on_free ? id : ~std::uint64_t{0}),
      grow_first(op.grow_before_reclaim),
      large_budget(op.grow_before_reclaim || op.front_cache_peak_fraction > 0),
      clock(o),
      arena(u, clock,
            detail::arena_options{op.min_segment_bytes, op.max_reserved_bytes, op.address_range_bytes,
                                  op.release_threshold_bytes, op.idle_budget, op.grow_before_reclaim,
                                  handle_bytes_for(op), op.wait_before_grow, op.remap_time_budget,
                                  op.remap_cost_ns_per_granule, op.remap_clock_ns, op.stream_ordered_moves,
                                  slab_zone_for(op)}),
      slabs(arena, clock, small_max, op.step_plan) {
  detail::check_pool_tuning(op);
  if (op.zero_on_free && !u.can_zero())
    throw std::invalid_argument(fmt::format(
        "gpumem::pool: zero_on_free needs an upstream that can zero memory, and {} cannot", u.name()));
  if (op.initial_reserve_bytes > op.release_threshold_bytes)
    throw std::invalid_argument(fmt::format(
        "gpumem::pool: initial_reserve_bytes {} is over release_threshold_bytes {}: the pool would give the "
        "reserve back at the first free",
        op.initial_reserve_bytes, op.release_threshold_bytes));
  if (op.initial_reserve_bytes) {
    std::string why;
    if (!arena.reserve_upfront(op.initial_reserve_bytes, &why)) {
      oom_report r;
      r.requested_bytes = op.initial_reserve_bytes;
      r.reserved_bytes = arena.reserved_bytes();
      r.cached_bytes = r.reserved_bytes;
      r.limit_bytes = op.max_reserved_bytes == SIZE_MAX ? 0 : op.max_reserved_bytes;
      r.upstream_said = std::move(why);
      r.advice = "pool_options::initial_reserve_bytes is more than the upstream (or max_reserved_bytes) gives: "
                 "ask for less, or 0 to grow as requests come";
      throw out_of_memory(std::move(r));
    }
    note_reserved();
  }
  // The step plan needs each thread's own front cache, blocks that go back to the arena as they
  // are freed (zeroing and growing first keep their own ways), and a virtual upstream: what it
  // spares is moves, and on plain segments its region would be one more segment beside the rest.
  plan_direct = op.step_plan && bins_enabled && !zero_on_free && !grow_first && arena.is_virtual();
  // Without per-thread caches every thread shares one front (and its table of live blocks).
  if (!bins_enabled) {
    fronts.push_back(std::make_unique<detail::front_cache>(grow_first));
    front_count = 1;
  }
  detail::register_pool(id);
}

pool::impl::~impl() { detail::unregister_pool(id); }

pool::pool(upstream& up, ordering& ord, pool_options opts) : impl_(std::make_unique<impl>(up, ord, opts)) {}
pool::pool(upstream& up, ordering& ord, const pool_options& opts, const detail::pool_tuning& tuning)
    : impl_(std::make_unique<impl>(up, ord, detail::pool_config(opts, tuning))) {}
pool::~pool() = default;

void pool::record_use(void* ptr, stream_ref s) {
  impl& p = *impl_;
  const auto a = reinterpret_cast<std::uintptr_t>(ptr);
  std::lock_guard lock(p.m);
  detail::all_fronts_locked held(p.fronts);
  for (auto& f : p.fronts) {
    if (detail::block_rec* r = f->find_live(a)) {
      if (s == r->stream) return;
      r->state |= detail::rec_used_elsewhere;
      auto& v = p.used_on[a];
      if (std::find(v.begin(), v.end(), s) == v.end()) v.push_back(s);
      return;
    }
  }
  throw std::invalid_argument(fmt::format("gpumem::pool::record_use: {} is not a live allocation of this pool", ptr));
}

void pool::release_stream(stream_ref s) {
  impl& p = *impl_;
  std::lock_guard lock(p.m);
  p.flush_fronts();        // blocks cached for `s` go back as freed on `s`...
  p.clock.forget(s);       // ...then one wait covers every free on `s`
  p.arena.promote();       // what `s` owned is ready for every stream
  p.slabs.disown(s);
  p.slabs.promote();
  for (auto& [a, streams] : p.used_on) std::erase(streams, s);
  if (p.plan.region() && p.plan.stream() == s) {
    // Its blocks will be freed on streams that exist: the plan drains.
    detail::all_fronts_locked held(p.fronts);
    p.plan.drop();
    p.return_plan_region_if_drained();
  }
}

void pool::trim() {
  impl& p = *impl_;
  std::lock_guard lock(p.m);
  p.flush_fronts();
  if (p.plan.region()) {
    // The plan's region is cached memory too: it goes back once no planned block is live.
    detail::all_fronts_locked held(p.fronts);
    p.plan.drop();
    p.return_plan_region_if_drained();
  }
  p.release_all_cached();
  p.note_reserved();
}

void pool::settle() {
  impl& p = *impl_;
  std::lock_guard lock(p.m);
  p.flush_fronts();
  // Frees whose streams have run by now turn ready (an event recorded, none waited for), so the
  // slabs they emptied can go too.
  p.clock.cover_all();
  p.promote_ready();
  p.slabs.release_empty();
  p.note_reserved();
}

}  // namespace gpumem
