#pragma once
// Test support: an oracle for the pool's contract, shared by the typed suites, the randomized and
// threaded tests and the fuzzer.
//
//  - spy_ordering forwards to a real `ordering` (the simulated device's) and records what the pool
//    could legitimately know about stream progress: an event counts as completed only once the pool
//    saw it complete (query() true or synchronize()). Memory freed on stream T may be handed to
//    stream X != T only after an event recorded on T *after the free* is known complete (or X was
//    made to wait on one with stream_wait). The spy answers exactly that question.
//  - pool_model is a shadow of every live allocation (ptr, bytes, alignment, stream, record_use
//    streams) and of freed ranges not yet known safe for every stream. Each allocation is checked
//    against it: aligned, overlapping no live block, mapped on the device, and not handed to a
//    stream that could still touch it. check_stats()/check_full() compare with the pool's figures.
//
// Both are thread-safe. In threaded use, call on_free() *before* pool::deallocate (so the range is
// never "live" in the model after the pool could hand it out again) and on_allocate() after
// pool::allocate returns.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "gpumem/detail/pool_tuning.hpp"
#include "gpumem/errors.hpp"
#include "gpumem/pool.hpp"
#include "gpumem/sim_device.hpp"
#include "gpumem/upstream.hpp"

namespace gpumem::test {

// Sizes the tests speak in.
inline constexpr std::size_t KiB = std::size_t{1} << 10;
inline constexpr std::size_t MiB = std::size_t{1} << 20;

class spy_ordering final : public ordering {
 public:
  explicit spy_ordering(ordering& inner) : inner_(inner) {}
  event_ref record(stream_ref s) override;
  bool query(event_ref e) override;
  void synchronize(event_ref e) override;
  void stream_wait(stream_ref s, event_ref e) override;
  void release(event_ref e) noexcept override;

  // Events the pool has recorded on `s` so far.
  std::uint64_t recorded(stream_ref s) const;
  // May work on `x` touch memory freed on `t` when `recorded(t)` was `c`?
  bool safe(stream_ref t, std::uint64_t c, stream_ref x) const;
  // May work on any stream touch it?
  bool safe_for_all(stream_ref t, std::uint64_t c) const;
  std::uint64_t live_events() const;

 private:
  struct ev { stream_ref stream; std::uint64_t index; };
  bool safe_locked(stream_ref t, std::uint64_t c, stream_ref x) const;
  void learn(const ev& e);
  ordering& inner_;
  mutable std::mutex m_;
  std::unordered_map<stream_ref, std::uint64_t> recorded_, known_done_;
  std::map<std::pair<stream_ref, stream_ref>, std::uint64_t> waited_;  // (waiter, on) -> index
  std::unordered_map<event_ref, ev> events_;
};

class pool_model;

// Forwards to a real upstream; every unmap / release of memory is checked against the model: it
// must touch no live block and no freed range some stream's pending work may still use (on a real
// GPU that unmaps or frees memory under running kernels). Violations are kept, not thrown (unmap
// is noexcept): pool_model::check_stats() reports them. It also keeps where each physical handle
// is mapped, so the model sees memory mapped at two places (the pool's stream-ordered moves) as
// the same memory — by the physical memory's identity, not its handle's value, which a driver (and
// sim_options::reuse_handle_values) may give to new memory while the old is still mapped.
class spy_upstream final : public upstream {
 public:
  explicit spy_upstream(upstream& inner) : inner_(inner) {}
  void watch(pool_model* m) { model_ = m; }
  std::string name() const override { return inner_.name(); }
  std::size_t granularity() const noexcept override { return inner_.granularity(); }
  bool supports_virtual() const noexcept override { return inner_.supports_virtual(); }
  std::size_t capacity_bytes() const noexcept override { return inner_.capacity_bytes(); }
  void* allocate_segment(std::size_t bytes) override { return inner_.allocate_segment(bytes); }
  void free_segment(void* base, std::size_t bytes) noexcept override;
  void* reserve_range(std::size_t bytes) override { return inner_.reserve_range(bytes); }
  void release_range(void* base, std::size_t bytes) noexcept override { inner_.release_range(base, bytes); }
  std::optional<physical_handle> create_physical(std::size_t bytes) override;
  void release_physical(physical_handle h, std::size_t bytes) noexcept override;
  void map(void* at, std::size_t bytes, physical_handle h) override;
  void unmap(void* at, std::size_t bytes) noexcept override;
  // The other places [a, end) is mapped at (same handle, same offsets), as [start, end) ranges.
  std::vector<std::pair<std::uintptr_t, std::uintptr_t>> aliases(std::uintptr_t a, std::uintptr_t end) const;

 private:
  upstream& inner_;
  pool_model* model_ = nullptr;
  mutable std::mutex m_;
  std::unordered_map<std::uint64_t, std::uint64_t> memory_of_;  // handle value -> id of the memory it names
  std::uint64_t next_memory_ = 0;
  std::map<std::uintptr_t, std::pair<std::size_t, std::uint64_t>> mappings_;  // at -> (bytes, memory id)
  std::unordered_map<std::uint64_t, std::vector<std::uintptr_t>> places_;      // memory id -> at
};

struct shadow_block {
  std::size_t bytes = 0;
  std::size_t alignment = 0;
  stream_ref stream = {};
  std::vector<stream_ref> used_on;
};

// Thrown by the model on a broken contract; tests turn it into a failure with the message.
struct model_error : std::logic_error {
  using std::logic_error::logic_error;
};

class pool_model {
 public:
  // `p` may be null (a resource that is not a pool: only the shadow checks run); `dev` null skips
  // the mapping check; `spy` null skips the stream-safety check.
  pool_model(const pool* p, const sim_device* dev, const spy_ordering* spy) : pool_(p), dev_(dev), spy_(spy) {}

  // The least alignment every block honours whatever was asked (the pool: 256, like cudaMalloc).
  void set_min_alignment(std::size_t a) { min_alignment_ = a; }
  // The bytes the pool really hands out for a request (its rounding: a slab slot of the size
  // class, or 256 B steps). The stream check and the consumption of freed ranges cover all of it:
  // the pool hands out whole blocks, and after a legitimate handout the padding belongs to the new
  // owner too. Default: exactly the request.
  void set_footprint(std::function<std::size_t(std::size_t bytes, std::size_t alignment)> f) { footprint_ = std::move(f); }
  // Where the pool may hand out more than the footprint (growing first, a large request may get a
  // larger cached block: src/alloc/front_cache.hpp, pop_fit): the size of the block at `ptr`, or 0
  // where the footprint stands. Asked before the model's lock is taken: it may ask the pool.
  void set_block_bytes(std::function<std::size_t(const void* ptr, std::size_t bytes, std::size_t alignment)> f) {
    block_bytes_ = std::move(f);
  }
  // Where a block's memory is mapped elsewhere too (spy_upstream::aliases): a handout must be safe
  // for its stream at every place its memory has, and no live block may sit at another of them.
  void set_aliases(const spy_upstream* up) { aliases_ = up; }
  void on_allocate(const void* ptr, std::size_t bytes, std::size_t alignment, stream_ref s);
  void on_record_use(const void* ptr, stream_ref s);
  // Returns the block's shadow (bytes etc.). Throws model_error if `ptr` is not live in the model.
  shadow_block on_free(const void* ptr, stream_ref s);

  // Cheap: the pool's live bytes match, and reserved == live + cached.
  void check_stats() const;
  // O(blocks): check_stats, pool::check_invariants, every live block still mapped, prune freed
  // records that are safe for every stream.
  void check_full();

  std::size_t live_count() const;
  std::size_t live_bytes() const;
  std::size_t freed_records() const;
  std::vector<std::pair<std::uintptr_t, shadow_block>> live_blocks() const;
  bool is_live(const void* ptr) const;
  // Called by spy_upstream: [a, a+n) is about to lose its memory.
  void on_memory_gone(std::uintptr_t a, std::size_t n, const char* how);
  std::vector<std::string> violations() const;

 private:
  // `passed_on`: memory at another place took this range's memory for a stream it was safe for;
  // the new owner carries the obligation, as a handout at this place would have (the record stays
  // for the unmap check of this place).
  struct freed {
    std::uintptr_t end;
    std::vector<std::pair<stream_ref, std::uint64_t>> marks;
    bool passed_on = false;
  };
  void check_stats_locked(const pool_stats& st) const;
  // Under m_: the first live block / freed range that ends after `a` (it may start before it).
  std::map<std::uintptr_t, shadow_block>::iterator first_live_reaching(std::uintptr_t a);
  std::map<std::uintptr_t, freed>::iterator first_freed_reaching(std::uintptr_t a);
  const pool* pool_;
  const sim_device* dev_;
  const spy_ordering* spy_;
  mutable std::mutex m_;
  std::map<std::uintptr_t, shadow_block> live_;
  std::map<std::uintptr_t, freed> freed_;
  std::size_t live_bytes_ = 0;
  std::size_t min_alignment_ = default_alignment;
  std::function<std::size_t(std::size_t, std::size_t)> footprint_;
  std::function<std::size_t(const void*, std::size_t, std::size_t)> block_bytes_;
  const spy_upstream* aliases_ = nullptr;
  std::vector<std::string> violations_;
};

// Installs a misuse handler that records reports (instead of aborting) for its lifetime, and
// restores the previous one. One at a time per process.
class misuse_recorder {
 public:
  misuse_recorder();
  ~misuse_recorder();
  misuse_recorder(const misuse_recorder&) = delete;
  misuse_recorder& operator=(const misuse_recorder&) = delete;
  std::vector<misuse_report> take();
  std::size_t count() const;

 private:
  misuse_handler previous_;
};

// The footprint function for a gpumem::pool with these options.
std::function<std::size_t(std::size_t, std::size_t)> pool_footprint(const pool_options& po);

// Log-uniform size in [lo, hi] from a 64-bit random value pair.
std::size_t log_uniform(std::uint64_t r1, std::uint64_t r2, std::size_t lo, std::size_t hi);

// A small fast PRNG (splitmix64) so sequences are the same on every platform.
struct rng {
  std::uint64_t state;
  explicit rng(std::uint64_t seed) : state(seed) {}
  std::uint64_t next() {
    std::uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  std::uint64_t below(std::uint64_t n) { return n ? next() % n : 0; }
  bool chance(unsigned percent) { return below(100) < percent; }
};

// A pool on a simulated device with the spy between them and a model over it.
struct sim_pool_rig {
  std::unique_ptr<sim_device> dev;
  std::unique_ptr<spy_ordering> spy;
  std::unique_ptr<spy_upstream> up;
  std::unique_ptr<pool> p;
  std::unique_ptr<pool_model> model;
  // A pool_options converts, with the library's tuning.
  sim_pool_rig(const sim_options& so, const detail::pool_config& po);
  ~sim_pool_rig() { up->watch(nullptr); }  // the pool's destructor unmaps after the model is gone
  // Allocate/free through the model.
  void* allocate(std::size_t bytes, std::size_t alignment, stream_ref s);
  void deallocate(void* ptr, stream_ref s);
  // Frees every live block, trims, and checks the device holds nothing.
  void free_all_and_trim(stream_ref s_for_free = {});
};

// An idle hole on stream 0: `hole` bytes, then `bound` bytes above them, the first freed (with
// so.auto_complete its granules stay mapped and idle), then `request` bytes that do not fit in
// the hole. Returns the pool's stats right after that request (the model checked); everything is
// then freed and trimmed.
pool_stats stats_after_idle_hole(const sim_options& so, const detail::pool_config& po, std::size_t hole, std::size_t bound,
                                 std::size_t request);

}  // namespace gpumem::test
