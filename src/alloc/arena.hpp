#pragma once
// The arena: a best-fit index over the blocks of the pool's address ranges. Splits, coalesces with
// both neighbours, grows, and — on a virtual upstream — maps, harvests and releases granules.
// Not thread-safe: the pool calls it under its lock. Its code, one job a file:
//   arena.cpp           construction, allocate / deallocate, promote, release: the entry points.
//   arena_index.cpp     the best-fit index: blocks, free lists, runs, the place search, carving.
//   arena_physical.cpp  the physical map: handles per granule, map and unmap, spares, kept mappings.
//   arena_moves.cpp     where a window's granules come from: spares, harvest, stream-ordered
//                       moves, oversized handles given back, growth; the remap time budget.
//   arena_inspect.cpp   reports and the invariant check.
//
// Free blocks are either stream-owned (freed on S: reusable by S at once, by others only after the
// stream clock says S has run past the free) or ready (reusable by all). Neighbours coalesce only
// when both are ready or both are owned by the same stream, so a merge never makes memory usable
// earlier than each part allowed.
//
// Physical memory on a virtual upstream: a granule must be mapped while any non-ready block (live,
// stream-owned, waiting) overlaps it — `busy_` counts those bytes per granule. A mapped granule
// with no busy byte is *idle*: ready free memory no stream can touch. Ready blocks are split where
// mapped granules meet unmapped ones, so each ready block is either mapped (every granule it
// touches is mapped) or unmapped (whole granules, none mapped); a *run* is a maximal stretch of
// free blocks (ready of either kind, or owned) side by side.
//
// The slow path (on a GPU every granule mapped or unmapped is a driver call):
//  1. best fit by size among the runs the stream can use (ready blocks, its own owned blocks) —
//     by address layout alone, so a program that repeats itself lands where it landed before;
//  2. within the few best-fitting runs, the place that needs the fewest granules mapped (0 when
//     it lies on mapped memory: no driver call at all);
//  3. the granules it needs come from spares, then from idle granules elsewhere (harvest: a
//     contiguous run unmapped in one call, mapped again here — same physical memory, no copy),
//     and only then from the upstream (growth). Each contiguous run is mapped in one call.
// Idle granules stay mapped until a request needs their memory elsewhere (or trim, or the release
// threshold): reserved grows only when no spare and no idle granule is left (beyond the optional
// idle budget), and a request that lands on mapped memory costs no driver call. Reserved memory
// is therefore what is mapped or spare — not the height of the address range — and holes of the
// wrong size cost address space, not memory.
//
// Handles of several granules (arena_options::max_handle_bytes): growth makes one physical handle
// for each run of missing granules, up to that size, mapped in one piece: fewer driver calls, and
// device copies over larger handles run faster. A mapping can only be
// unmapped whole, so a handle moves whole: harvest takes only handles whose granules are all idle
// and no larger than the run that needs them, and when only larger ones are idle the tight policy
// gives one back to the upstream before it grows, so reserved memory does not grow for want of a
// small piece.
//
// Stream-ordered moves (arena_options::stream_ordered_moves). On a GPU the host runs ahead of the
// device, and memory freed on stream S stays busy until S's work reaches the free: it cannot be
// unmapped, and the tight policy would grow beside it. But a request on S
// itself may use that memory now — its work is queued behind the free. So a handle whose every
// byte is free for S (ready, or owned by S) is mapped a second time under S's request, and its
// old place *retires*: a block no one can allocate, still mapped so S's queued work can finish
// there, unmapped (without a move or a growth) once the stream clock says S has run past the
// frees in it — or, a single-granule handle, left mapped as a kept mapping (below). The
// physical memory is counted once. Each handle has exactly one owner — one mapping that is not
// retiring, or a spare — and any number of retiring places. Where moved memory lands on a granule the request covers only in part, the rest of that granule becomes
// S's free memory, owned by S until S has run past the old place's frees, so no other stream can
// use it early; a request that fails puts what it marked back as S's free memory (no driver call
// was made).
//
// Kept mappings. A move costs two driver calls per granule — an unmap where the memory was idle and
// a map plus access where it is needed — and a job that repeats
// itself moves the same granules back and forth between the same places every step. So a
// single-granule handle moved away from granule G stays mapped at G as well: the arena counts G
// unmapped (nothing is placed over it without mapping it again), but the driver's mapping remains,
// a *kept mapping*. When a later request needs G and G's handle is idle where it is now (or a
// spare), the handle moves back without a driver call: its current place becomes a kept mapping
// in turn and G is mapped again. The physical memory is the same, counted once; only the address
// space holds the extra mappings. Aliasing is safe for the same reason a move is: a handle leaves
// a place only when every byte over it is ready (its frees done), and no block lies over a kept
// mapping until the arena maps it again. A kept mapping that another handle needs is unmapped
// then (the deferred half of the move), and all of a handle's kept mappings go before the handle
// goes back to the upstream.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "granule_bits.hpp"
#include "node_recycler.hpp"
#include "pointer_map.hpp"
#include "stream_clock.hpp"
#include "gpumem/pool.hpp"
#include "gpumem/upstream.hpp"

namespace gpumem::detail {

// Says why a request failed, where the caller asked (`why` not null).
inline void set_why(std::string* why, std::string text) {
  if (why) *why = std::move(text);
}

struct arena_options {
  std::size_t min_segment_bytes = std::size_t{2} << 20;
  std::size_t max_reserved_bytes = SIZE_MAX;
  std::size_t address_range_bytes = 0;
  std::size_t release_threshold_bytes = SIZE_MAX;
  double idle_budget = 0.0;  // pool_tuning::idle_budget
  // pool_tuning::grow_before_reclaim: idle granules are remapped elsewhere only when growing
  // fails, as if the idle budget had no bound.
  bool keep_idle = false;
  // pool_tuning::max_handle_bytes: the largest physical handle growth creates (at least a granule).
  std::size_t max_handle_bytes = 0;
  // pool_tuning::wait_before_grow: host-wait for pending frees before growing.
  bool wait_before_grow = false;
  // pool_tuning::remap_time_budget, remap_cost_ns_per_granule, remap_clock_ns.
  double remap_time_budget = 0.0;
  double remap_cost_ns_per_granule = 0.0;
  std::function<std::uint64_t()> remap_clock_ns{};
  // pool_tuning::stream_ordered_moves.
  bool stream_ordered_moves = false;
  // Virtual upstreams: slabs are carved from the upper half of the address range, every other
  // block from the lower half (the pool sets it growing first, without an initial reserve; see
  // `place`).
  bool slab_zone = false;
};

class arena {
 public:
  static constexpr std::size_t unit = default_alignment;  // every block is a multiple of this

  arena(upstream& up, stream_clock& clock, arena_options opts);
  ~arena();
  arena(const arena&) = delete;
  arena& operator=(const arena&) = delete;

  // A block of `size` bytes (a multiple of `unit`) at an address aligned to `alignment` for stream
  // `s`; 0 when it cannot be had without new upstream memory and `may_grow` is false, or not at
  // all (upstream refused, limit reached). `why` then says which.
  // `may_map` false: only a place already mapped (no granule mapped or unmapped; an event may
  // still be recorded to see whether other streams' frees are done), else 0.
  // `slab`: the block is a slab (arena_options::slab_zone).
  std::uintptr_t allocate(std::size_t size, std::size_t alignment, stream_ref s, bool may_grow,
                          std::string* why = nullptr, bool may_map = true, bool slab = false);
  // pool_options::initial_reserve_bytes: takes at least `bytes` from the upstream now, free for
  // every stream (virtual: mapped granules from the bottom of the range; plain: one segment).
  // Only on an arena that holds nothing yet. False (with `why`) if the upstream or the limit
  // refuses (what was taken may stay as spares: the pool then fails to construct, and the arena
  // gives everything back).
  bool reserve_upfront(std::size_t bytes, std::string* why);
  // The block at `addr` is unused after the work on `s` enqueued so far; also after the work on
  // each of `also_on` (record_use) when given. False if `addr` is not a live block.
  bool deallocate(std::uintptr_t addr, stream_ref s, const std::vector<stream_ref>& also_on = {});
  // The size of the live block at `addr`, 0 if there is none.
  std::size_t live_size(std::uintptr_t addr) const;
  // True if a free (cached) block starts at `addr`: a pointer freed already.
  bool is_free_block_start(std::uintptr_t addr) const;

  // After the stream clock moved: stream-owned and waiting blocks whose frees are done turn ready.
  void promote();
  // Gives idle granules, spares and whole free segments back to the upstream until at most
  // `keep_cached` bytes of cached memory remain (0: everything).
  void release(std::size_t keep_cached);

  // pool_tuning::reserve_ceiling for the next requests: growing past `bytes` of reserved memory
  // comes after moving idle memory and the stream's pending memory, whatever the idle budget says.
  void set_reserve_ceiling(std::size_t bytes) noexcept { ceiling_bytes_ = bytes; }

  std::size_t reserved_bytes() const noexcept;
  std::size_t allocated_bytes() const noexcept { return allocated_; }
  std::size_t largest_free_block() const;
  // Bytes of the granules live blocks lie on (virtual; plain: allocated bytes): what stays mapped
  // however free memory moves. O(blocks).
  std::size_t live_granule_bytes() const;
  std::vector<oom_report::stream_cache> owned_free_per_stream() const;
  void append_blocks(std::vector<block_info>& out) const;
  void check() const;  // throws std::logic_error on a broken invariant

  std::uint64_t upstream_calls() const noexcept { return upstream_calls_; }
  std::uint64_t upstream_releases() const noexcept { return upstream_releases_; }
  std::uint64_t maps() const noexcept { return maps_; }          // granules
  std::uint64_t unmaps() const noexcept { return unmaps_; }
  std::uint64_t map_calls() const noexcept { return map_calls_; }  // upstream calls (runs)
  std::uint64_t unmap_calls() const noexcept { return unmap_calls_; }
  bool is_virtual() const noexcept { return virtual_; }
  std::size_t granule_bytes() const noexcept { return granule_; }
  // remap_time_budget: host time charged for moving granules (ns), and the moves it turned down
  // (a request that then grew, or took what the budget's last resort gave).
  std::uint64_t remap_ns() const noexcept { return remap_charged_ns_; }
  std::uint64_t remaps_deferred() const noexcept { return remaps_deferred_; }
  // stream_ordered_moves: granules mapped a second time under a request on the stream that had
  // freed them (a subset of maps()).
  std::uint64_t stream_ordered_moves() const noexcept { return stream_ordered_moved_; }
  // Granules the driver mapped and unmapped: maps() and unmaps() less what kept mappings saved
  // (a granule mapped again where it still was, an unmap not yet made or never needed).
  std::uint64_t driver_maps() const noexcept { return driver_maps_; }
  std::uint64_t driver_unmaps() const noexcept { return driver_unmaps_; }
  std::size_t kept_mappings() const noexcept { return kept_count_; }

 private:
  // retiring: a handle's old place after a stream-ordered move; in no index, in no run, busy.
  enum class state : std::uint8_t { live, owned, ready, waiting, retiring };
  struct block;
  using block_node = std::pair<const std::uintptr_t, block>;  // a block_map element
  struct block {
    std::size_t size;
    std::uint32_t segment;
    state st;
    bool mapped;                 // ready on a virtual upstream: mapped or unmapped kind; else true
    stream_ref stream;           // live: allocating stream; owned: owner
    std::uint64_t seq;           // owned: the free's sequence on `stream`; retiring: the last one's
    std::vector<stream_mark> waits;  // waiting: all must be met
    // Owned or ready, on a virtual upstream: its neighbours in its list (block_list).
    block_node* list_prev = nullptr;
    block_node* list_next = nullptr;
  };
  using block_map = recycled_map<std::uintptr_t, block>;
  using free_index = recycled_set<std::pair<std::size_t, std::uintptr_t>>;
  // Free blocks linked through themselves (block::list_prev, list_next), in no order: a block
  // enters or leaves in a few stores, where an ordered set costs a search down its tree and a
  // rebalance, each level a load that waits for the one above.
  struct block_list {
    block_node* head = nullptr;
    std::size_t count = 0;
    void push(block_node* n) noexcept {
      n->second.list_prev = nullptr;
      n->second.list_next = head;
      if (head) head->second.list_prev = n;
      head = n;
      ++count;
    }
    void unlink(block_node* n) noexcept {
      block& b = n->second;
      (b.list_prev ? b.list_prev->second.list_next : head) = b.list_next;
      if (b.list_next) b.list_next->second.list_prev = b.list_prev;
      b.list_prev = b.list_next = nullptr;
      --count;
    }
    template <class F>
    void for_each(F&& f) const {
      for (const block_node* n = head; n; n = n->second.list_next) f(n->first, n->second);
    }
  };
  // One stream's owned free blocks. Plain upstreams find the best fit among them by size
  // (`by_size`). Virtual upstreams place by runs (`place`) and never ask them by size on a
  // request's path, so there they are a list linked through the blocks themselves: a free and
  // the coalescing after it link and unlink in a few instructions, where an ordered set costs a
  // node, a search and a rebalance each. The few that want them by size (move_pending,
  // largest_free_block) sort or scan.
  struct owned_blocks {
    free_index by_size;  // plain upstreams
    block_list list;     // virtual upstreams
    explicit owned_blocks(node_recycler& r) : by_size(free_index::allocator_type(r)) {}
    bool empty() const noexcept { return list.head == nullptr && by_size.empty(); }
  };
  struct segment { std::uintptr_t base; std::size_t size; bool alive; };

  free_index& index_of(const block& b);
  owned_blocks& owned_of(stream_ref s);  // made if none
  void index_insert(block_map::iterator it);
  void index_erase(block_map::iterator it);
  // Calls f(address, block) for each of `o`'s blocks (in no particular order).
  template <class F>
  void for_each_owned(const owned_blocks& o, F&& f) const {
    for (const auto& [size, addr] : o.by_size) f(addr, blocks_.at(addr));
    o.list.for_each(f);
  }
  block_map::iterator coalesce(block_map::iterator it);
  // Splits block `b` (in no index) at `at`: `b` keeps [.., at), the returned block (in no index,
  // same state) holds the rest.
  block_map::iterator split(block_map::iterator b, std::uintptr_t at);
  // Virtual upstreams: a free block reaching over `x` (not starting there) is split at `x`, both
  // parts indexed; nothing to do at a block's start or the range's end.
  void cut_at(std::uintptr_t x);
  block_map::iterator find_fit(free_index& idx, std::size_t size, std::size_t alignment);
  // Plain upstreams: the best fit among `s`'s owned blocks and the ready blocks; owned wins a tie.
  block_map::iterator best_fit(std::size_t size, std::size_t alignment, stream_ref s);
  // Plain upstreams: makes [start, start + size) of the free block `it` live for `s`; the rest
  // stays free.
  std::uintptr_t carve(block_map::iterator it, std::uintptr_t start, std::size_t size, stream_ref s);
  std::uintptr_t allocate_plain(std::size_t size, std::size_t alignment, stream_ref s, bool may_grow, std::string* why);
  bool grow_segment(std::size_t size, std::string* why);
  void make_free(block_map::iterator it);  // a block entering owned/ready: index + coalesce

  // Virtual upstreams.
  std::uintptr_t granule_addr(std::size_t g) const noexcept { return range_base_ + g * granule_; }
  std::size_t granule_of(std::uintptr_t a) const noexcept { return (a - range_base_) >> granule_log2_; }
  block_map::iterator block_at(std::uintptr_t a);  // the block containing `a`
  // Where in a free run stream `s` can use [start, start + size) needs the fewest granules mapped,
  // looking at up to `runs` of the best-fitting runs; false if none can hold it.
  bool place(std::size_t size, std::size_t alignment, stream_ref s, std::size_t runs, std::uintptr_t& start,
             std::size_t& cost);
  bool foreign_owned(stream_ref s) const;  // another stream owns free blocks
  // `holder`: the block that holds `start`, if the caller knows it (else blocks_.end()).
  std::uintptr_t carve_window(std::uintptr_t start, std::size_t size, stream_ref s, block_map::iterator holder);
  // A physical handle of `granules` granules, mapped or spare.
  struct piece {
    physical_handle h;
    std::size_t granules;
    bool grown = false;  // created for this request; else a spare (memory moved from elsewhere)
    bool alias = false;  // still mapped at a retiring place (a stream-ordered move)...
    std::uintptr_t from = 0;  // ...this one
  };
  // Kept mappings (see the header comment).
  // The handle kept mapped at granule `t`, a spare or (`from_idle`) idle where it is now, moved
  // to `got` with its current place kept mapped in turn; false if there is none or it is busy or
  // inside [keep_lo, keep_hi).
  bool take_kept(std::size_t t, std::size_t keep_lo, std::size_t keep_hi, bool from_idle, std::vector<piece>& got);
  void drop_kept(std::size_t g);        // the kept mapping at `g`, if any, unmapped (a driver call)
  void drop_kept_of(physical_handle h);  // every kept mapping of `h`: before it goes upstream
  void forget_kept(std::size_t g);       // the kept mapping at `g` is mapped again: bookkeeping only
  // Granule `g` leaves its place (the pool counts it unmapped): `keep`, its handle stays mapped
  // there as a kept mapping; else the driver has just unmapped it.
  void leave_granule(std::size_t g, bool keep);
  // Maps every unmapped granule under [a, a + n) (ready memory); false if memory could not be had.
  // [req_lo, req_hi), inside the window, is what the request will carve (the whole window unless
  // given): memory moved in stream order onto the rest of the window's granules stays `s`'s.
  bool map_window(std::uintptr_t a, std::size_t n, stream_ref s, bool may_grow, std::string* why,
                  std::uintptr_t req_lo = 0, std::uintptr_t req_hi = 0);
  // arena_options::slab_zone: a slab that needs granules mapped gets the rest of its aligned
  // chunk of the zone mapped with it, in one handle (see allocate).
  static constexpr std::size_t slab_chunk_granules = 4;
  bool map_slab_chunk(std::uintptr_t start, std::size_t size, stream_ref s, bool may_grow, std::string* why);
  // Handles adding up to exactly `count` granules, for one run of missing granules: spares, then
  // idle handles outside [keep_lo, keep_hi), then new ones. Appended to `got`.
  // `g0`: the run's first granule, where a kept mapping of an idle handle may serve at no cost.
  bool take_physical(std::size_t g0, std::size_t count, std::size_t keep_lo, std::size_t keep_hi, stream_ref s,
                     bool may_grow, std::vector<piece>& got, std::string* why);
  // [x, y), ready mapped memory (or already `s`'s), becomes free memory owned by `s` until its
  // clock passes `seq`: the rest of a granule that memory moved in stream order landed on.
  void hold_for(std::uintptr_t x, std::uintptr_t y, stream_ref s, std::uint64_t seq);
  // The largest spare of at most `most` granules, moved to `got`; false if none.
  // Spares kept mapped in [wanted_lo, wanted_hi) are not taken.
  bool take_spare(std::size_t most, std::vector<piece>& got, std::size_t wanted_lo = 0, std::size_t wanted_hi = 0);
  void take_spare_at(std::size_t i, std::vector<piece>& got);  // spare `i` moved to `got`
  void remove_spare_at(std::size_t i);  // spare `i` out of the list and its counts (taken or released)
  std::size_t spare_index(physical_handle h) const;              // SIZE_MAX: `h` is no spare
  // Unmaps up to `want` granules of idle handles (each of at most `want`, every granule idle)
  // outside [keep_lo, keep_hi), one contiguous stretch (one upstream call), into the spares;
  // returns how many granules (0: none there, or, `within_budget`, none above the idle budget).
  // `keep_mappings`: single-granule handles stay mapped where they were (a move, not a release).
  std::size_t harvest(std::size_t want, std::size_t keep_lo, std::size_t keep_hi, bool within_budget,
                      bool keep_mappings = true);
  // Gives one spare or idle handle of more than `most` granules (outside [keep_lo, keep_hi)) back
  // to the upstream; `within_budget`: only idle memory above the idle budget. False if none.
  bool release_oversized(std::size_t most, std::size_t keep_lo, std::size_t keep_hi, bool within_budget);
  // The highest handle whose granules are all idle, outside [keep_lo, keep_hi), of at most (or,
  // `larger`, more than) `most` granules; its first granule, or SIZE_MAX.
  std::size_t top_idle_handle(std::size_t most, bool larger, std::size_t keep_lo, std::size_t keep_hi) const;
  bool handle_idle(std::size_t head) const;  // every granule of the handle at `head` idle
  // Stream-ordered moves: up to `want` granules in one handle (outside [keep_lo, keep_hi)) whose
  // every byte is free for `s` (ready, or owned by `s`; found under `s`'s owned blocks): its place
  // retires and the handle goes to `got`. Returns the granules (0: none; or, `within_budget`, the pool's cached
  // memory would fall below the idle budget).
  std::size_t move_pending(std::size_t want, std::size_t keep_lo, std::size_t keep_hi, stream_ref s,
                           bool within_budget, std::vector<piece>& got);
  bool free_for(std::size_t head, stream_ref s) const;  // every byte of the handle ready or owned by s
  void retire(std::size_t g0, std::size_t g1, stream_ref s);  // [g0, g1): one handle's place
  void finish_retiring(block_map::iterator it);  // S ran past: unmapped, ready
  void keep_unmapped(const piece& p);  // a handle taken but not mapped: a spare, or back to its place
  std::size_t idle_budget_granules() const;
  // Growing `granules` more would take reserved past the reserve ceiling.
  bool past_ceiling(std::size_t granules) const noexcept {
    return ceiling_bytes_ != SIZE_MAX && reserved_bytes() + granules * granule_ > ceiling_bytes_;
  }
  // remap_time_budget: true while the bucket of host time for moves is in debt (refilled first);
  // remap_allowed is the opposite, and counts a refusal as a move deferred.
  bool remap_budget_spent();
  bool remap_allowed();
  // Charges a move's host time: `ns` measured, at least the modeled cost of `granules`.
  void charge_remap(std::uint64_t ns, std::size_t granules);
  std::uint64_t now_ns() const;
  void map_pieces(std::size_t g0, const piece* pieces, std::size_t count, std::size_t& done);
  // Unmaps [g0, g1) — whole handles — and keeps their handles as spares. `keep_mappings`: where
  // every handle is one granule, they stay mapped there as kept mappings (no driver call).
  void unmap_run(std::size_t g0, std::size_t g1, bool keep_mappings = false);
  void add_spare(const piece& p);     // a handle not mapped, kept; spare_granules_ follows
  void give_back_pieces(const piece* begin, const piece* end);  // a failed request's handles
  void release_spare(std::size_t i);  // spare `i` back to the upstream
  // [a, e) — inside one ready block of the other kind — becomes mapped (or unmapped) ready memory.
  void set_mapped(std::uintptr_t a, std::uintptr_t e, bool mapped);
  void run_add(std::uintptr_t a, std::size_t n);     // [a, a + n) became free (owned or ready)
  // A run in runs_, ordered by size, then start. Its fields are mutable so reshape_run can change
  // a run in place where it keeps its rank among the others, which is most of the time (a run
  // loses or gains a block at one end): no node taken out and put back, no search for its new
  // place, no rebalancing.
  struct run_by_size {
    mutable std::size_t size;
    mutable std::uintptr_t start;
    auto operator<=>(const run_by_size&) const = default;
  };
  using run_set = recycled_set<run_by_size>;
  // A run in run_at_, ordered by start: its length, and its entry in runs_ (so a run that changes
  // finds that entry without a search). Mutable for the same reason as run_by_size: runs never
  // overlap, so a run that gains or loses a block at its front keeps its rank by start, and its
  // start changes in place rather than by taking the node out and putting it back, on every carve
  // from a run's front and every free just before one.
  struct run_entry {
    mutable std::uintptr_t start;
    mutable std::size_t size;
    mutable run_set::iterator by_size;
  };
  struct by_start {
    using is_transparent = void;  // looked up by address
    bool operator()(const run_entry& x, const run_entry& y) const noexcept { return x.start < y.start; }
    bool operator()(const run_entry& x, std::uintptr_t a) const noexcept { return x.start < a; }
    bool operator()(std::uintptr_t a, const run_entry& y) const noexcept { return a < y.start; }
  };
  using run_map = std::set<run_entry, by_start, recycled<run_entry>>;
  // Run `r` becomes [start, start + size), still between its neighbours: its entries in run_at_
  // and runs_ change where they are.
  void reshape_run(run_map::iterator r, std::uintptr_t start, std::size_t size);
  void run_remove(std::uintptr_t a, std::size_t n);  // [a, a + n), inside a run, became live
  // A new run [start, start + size), just before `next` in run_at_; and a run gone. Both keep the
  // tables of runs by start and by end in step.
  void run_insert(run_map::iterator next, std::uintptr_t start, std::size_t size);
  void run_erase(run_map::iterator r);
  void add_busy(std::uintptr_t a, std::size_t n, bool add);
  // Unmapped granules under [a, a + n); the count stops at `enough`.
  std::size_t unmapped_granules(std::uintptr_t a, std::size_t n, std::size_t enough = SIZE_MAX) const;

  upstream& up_;
  stream_clock& clock_;
  arena_options opts_;
  bool virtual_;
  std::size_t granule_;
  int granule_log2_;  // granule_ is a power of two: granule_of shifts instead of dividing
  node_recycler nodes_;  // the nodes of the trees below (declared first: destroyed after them)
  block_map blocks_{block_map::allocator_type(nodes_)};
  // Every block by its start, beside blocks_ (which keeps them in address order for the walks to
  // a block's neighbours): a lookup by address is a probe or two of a table, not a walk down the
  // tree, each level of which waits for the load of the one above. Blocks enter and leave blocks_ only through emplace_block and erase_block, which keep the two alike;
  // check() compares them.
  pointer_map<block_map::iterator> block_at_start_;
  block_map::iterator emplace_block(std::uintptr_t a, block b) {
    auto [it, added] = blocks_.emplace(a, std::move(b));
    if (added) block_at_start_.insert(a, it);
    return it;
  }
  // A new block at `a`, which lies just before `next` (the block after it, or blocks_.end()): with
  // the place known the tree checks it against `next` and the block before, with no search from the
  // root. Splits know it — every block the arena carves from another.
  block_map::iterator emplace_block_before(block_map::iterator next, std::uintptr_t a, block b) {
    const std::size_t before = blocks_.size();
    auto it = blocks_.emplace_hint(next, a, std::move(b));
    if (blocks_.size() != before) block_at_start_.insert(a, it);
    return it;
  }
  block_map::iterator erase_block(block_map::iterator it) {
    block_at_start_.erase(it->first);
    return blocks_.erase(it);
  }
  block_map::iterator find_block(std::uintptr_t a) {
    const block_map::iterator* i = block_at_start_.find(a);
    return i ? *i : blocks_.end();
  }
  block_map::const_iterator find_block(std::uintptr_t a) const {
    const block_map::iterator* i = block_at_start_.find(a);
    return i ? block_map::const_iterator(*i) : blocks_.end();
  }
  // Ready blocks. Plain upstreams take the best fit among them by size (best_fit). Virtual ones
  // place by runs (`place`) and never ask them by size on a request's path, so there they are
  // lists, as owned blocks are: one of the mapped, one of the unmapped. largest_free_block scans.
  free_index ready_{free_index::allocator_type(nodes_)};  // plain upstreams
  block_list ready_list_, void_list_;                     // virtual upstreams: mapped, unmapped
  std::unordered_map<stream_ref, owned_blocks> owned_;  // an entry for each stream that owns free blocks
  owned_blocks* owned_last_ = nullptr;  // owned_of's memory: owned_[owned_last_stream_], until erased
  stream_ref owned_last_stream_ = {};
  std::vector<std::uintptr_t> waiting_;  // addresses of waiting blocks
  // Set by `place`: the mapped block that holds the whole place it chose, where it saw one (its
  // granules need no count); else blocks_.end(). Valid until the blocks change.
  block_map::iterator placed_in_ = blocks_.end();
  // The part of the address range `place` may choose from for the request at hand: all of it, or
  // one half under arena_options::slab_zone.
  std::uintptr_t zone_lo_ = 0, zone_hi_ = UINTPTR_MAX;
  std::vector<segment> segments_;
  std::size_t segment_bytes_ = 0;        // plain: sum of live segments
  std::size_t allocated_ = 0;            // bytes in live blocks
  std::size_t ceiling_bytes_ = SIZE_MAX;  // pool_tuning::reserve_ceiling, as bytes (set_reserve_ceiling)

  // virtual upstream state
  std::uintptr_t range_base_ = 0;
  std::size_t range_bytes_ = 0;
  std::vector<physical_handle> granule_handle_;   // value 0: unmapped; a handle's every granule
  granule_bits mapped_bits_;                      // granule_handle_[g] != 0, as bits (unmapped_granules)
  std::vector<std::uint32_t> handle_head_;        // mapped: how far the granule is from its handle's first
  std::vector<std::uint32_t> handle_granules_;    // mapped: its handle's size in granules
  std::size_t max_handle_granules_ = 1;
  std::vector<std::uint32_t> busy_;               // non-ready bytes overlapping each granule
  // Kept mappings: per granule the handle still mapped there though the granule counts unmapped
  // (value 0: none), all below kept_end_ (a handle's kept places are found by scanning there: it is
  // needed only when a handle goes upstream); and where each single-granule handle is mapped, its
  // nodes from the recycler (a move maps and unmaps granules by the hundred).
  std::vector<physical_handle> kept_;
  std::size_t kept_end_ = 0;
  using home_map = std::unordered_map<std::uint64_t, std::size_t, std::hash<std::uint64_t>, std::equal_to<>,
                                      recycled<std::pair<const std::uint64_t, std::size_t>>>;
  home_map home_{0, std::hash<std::uint64_t>{}, std::equal_to<>{}, home_map::allocator_type(nodes_)};
  std::size_t kept_count_ = 0;
  std::vector<std::size_t> released_under_;  // first granules of retiring places whose handle went upstream
  std::uint64_t driver_maps_ = 0, driver_unmaps_ = 0;
  granule_set idle_;  // mapped granules with no busy byte
  std::vector<piece> spares_;                     // physical handles not mapped
  std::size_t spare_granules_ = 0;
  std::size_t largest_spare_ = 0;  // no spare is larger (in granules); reset when there is none
  std::size_t mapped_ = 0;                        // granules mapped
  std::size_t high_water_ = 0;                    // end of the highest block ever live, relative
  // Runs: maximal stretches of free blocks (ready, mapped or not, and owned), by start and by size.
  run_map run_at_{run_map::allocator_type(nodes_)};
  run_set runs_{run_set::allocator_type(nodes_)};
  // Every run by its start and by its end, beside run_at_, as block_at_start_ is beside blocks_: a
  // freed block finds the runs it joins, and a carve the run it takes from, by a probe each rather
  // than a walk down run_at_ (the walk is left for a carve from a run's middle and a block that
  // joins no run). check() compares them with run_at_.
  pointer_map<run_map::iterator> run_by_start_, run_by_end_;

  std::uint64_t upstream_calls_ = 0, upstream_releases_ = 0, maps_ = 0, unmaps_ = 0, map_calls_ = 0, unmap_calls_ = 0;

  // remap_time_budget's bucket: host time (ns) the pool may still spend moving granules; negative:
  // in debt after a move that cost more than was there, repaid as time passes.
  double remap_tokens_ns_ = 0;
  std::uint64_t remap_refilled_at_ = 0;
  std::uint64_t remap_charged_ns_ = 0, remaps_deferred_ = 0;
  std::uint64_t remap_modeled_extra_ns_ = 0;  // modeled cost above the measured: time passed (now_ns)

  // Stream-ordered moves.
  std::vector<std::uintptr_t> retiring_;      // addresses of retiring blocks
  std::size_t retiring_granules_ = 0;         // mapped granules at retiring places
  std::uint64_t stream_ordered_moved_ = 0;
};

}  // namespace gpumem::detail
