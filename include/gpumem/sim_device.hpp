#pragma once
// A simulated GPU: capacity, granularity, an address space of real-looking addresses that are never
// backed, streams and events whose completion a test controls. Every upstream contract can be
// exercised against it without hardware.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "gpumem/core.hpp"
#include "gpumem/upstream.hpp"

namespace gpumem {

struct sim_options {
  std::size_t capacity_bytes = std::size_t{80} << 30;
  std::size_t granularity_bytes = default_granularity;
  bool virtual_memory = true;     // offer the virtual shape; false: plain segments only
  bool auto_complete = false;     // events complete as soon as they are recorded (trace replay)
  std::uintptr_t base_address = 0x7f0000000000;
  // create_physical hands out the value of the handle released last first, as a driver may
  // (cuMemRelease then cuMemCreate can return the same value): a stale mapping of the old memory
  // then carries the value of new memory. Off: every handle gets a value never used before.
  bool reuse_handle_values = false;
};

class sim_device {
 public:
  explicit sim_device(sim_options opts = {});
  ~sim_device();
  sim_device(const sim_device&) = delete;
  sim_device& operator=(const sim_device&) = delete;

  upstream& memory() noexcept;
  ordering& streams() noexcept;

  stream_ref create_stream();
  // After this, recording on or waiting with `s` is an error (std::logic_error), as on a GPU
  // where the handle is gone.
  void destroy_stream(stream_ref s);
  // Everything enqueued on `s` so far has run: events recorded there complete.
  void complete(stream_ref s);
  void complete_all();
  void set_auto_complete(bool on);

  // Fault injection: the n-th upstream call from now (1-based; create_physical / allocate_segment)
  // refuses as if out of memory; 0 disables. `fail_every` refuses all calls while set.
  void fail_nth_call(std::uint64_t n);
  void fail_every(bool on);

  std::size_t capacity_bytes() const noexcept;
  std::size_t used_bytes() const noexcept;        // physical bytes handed out
  std::size_t peak_used_bytes() const noexcept;
  std::uint64_t upstream_calls() const noexcept;  // calls that create memory
  std::uint64_t events_recorded() const noexcept;
  std::uint64_t events_pending() const noexcept;
  std::uint64_t zeroed_bytes() const noexcept;    // bytes zeroed through the upstream (zero_on_free)
  // True if [p, p+bytes) lies in memory the device handed out and is mapped.
  bool is_mapped(const void* p, std::size_t bytes) const noexcept;
  // is_mapped, and every mapping over the range is of physical memory not yet released. Memory
  // released while mapped stays mapped (and backed) until unmapped, as on a GPU, but nothing
  // should be handed out there: with reuse_handle_values its value may name new memory by now.
  bool is_mapped_live(const void* p, std::size_t bytes) const noexcept;
  // The value of the physical handle mapped at `p` (the one it had when mapped), 0 if none.
  std::uint64_t mapped_handle(const void* p) const noexcept;

  struct state;

 private:
  std::unique_ptr<state> state_;
};

// A byte-exact resource with no caching on the simulated device's address space: reserved = live,
// the floor every pool is measured against (`gpumem replay --resource exact`).
class exact_resource {
 public:
  explicit exact_resource(std::size_t capacity_bytes = std::size_t{80} << 30);
  ~exact_resource();
  void* allocate(std::size_t bytes, std::size_t alignment = default_alignment, stream_ref s = {});
  void deallocate(void* p, std::size_t bytes, std::size_t alignment = default_alignment,
                  stream_ref s = {}) noexcept;
  std::size_t live_bytes() const noexcept;
  std::size_t peak_live_bytes() const noexcept;

 private:
  struct state;
  std::unique_ptr<state> state_;
};

}  // namespace gpumem
