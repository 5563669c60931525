// The simulated device: memory accounting, an address space and controllable streams.
#include "gpumem/sim_device.hpp"
#include "gpumem/errors.hpp"

#include <fmt/format.h>

#include <bit>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <unordered_map>
#include <vector>

namespace gpumem {

// The whole device state behind one mutex: the simulator is for correctness, not speed, and a
// single lock makes it safe for multi-threaded pool tests.
struct sim_device::state {
  sim_options opts;
  mutable std::mutex m;
  std::uintptr_t next_address;          // bump pointer: addresses are never handed out twice
  std::size_t used = 0, peak_used = 0;
  std::uint64_t creates = 0;
  std::uint64_t calls_until_failure = 0;  // 0 = no planned failure
  bool fail_all = false;
  std::uint64_t next_handle = 1;
  std::vector<std::uint64_t> released_values;  // reuse_handle_values: the last released on top
  // Each creation of physical memory gets an id never used again, apart from the handle's value
  // (which reuse_handle_values hands out again): a mapping records the id of the memory it maps,
  // so a mapping left over from released memory is told from one of new memory with its value.
  std::uint64_t next_physical = 1;
  struct physical { std::size_t bytes; std::uint64_t id; };
  struct mapping { std::size_t bytes; std::uint64_t handle, id; };
  std::unordered_map<std::uint64_t, physical> handles;  // live physical memory by handle value
  std::map<std::uintptr_t, mapping> mappings;           // by address
  std::map<std::uintptr_t, std::size_t> segments;                 // plain segments
  std::map<std::uintptr_t, std::size_t> ranges;                   // reserved virtual ranges
  // Streams: an event's position on its stream; complete(s) moves the stream's done mark.
  std::uint64_t next_stream = 0x1000;
  struct stream_state { std::uint64_t recorded = 0, done = 0; };
  std::unordered_map<stream_ref, stream_state> streams;
  std::unordered_map<stream_ref, bool> destroyed;
  struct event_state { stream_ref stream; std::uint64_t position; };
  std::unordered_map<event_ref, event_state> events;
  event_ref next_event = 1;
  std::uint64_t events_recorded = 0;
  std::uint64_t zeroed_bytes = 0, zero_calls = 0;
  std::unique_ptr<upstream> up;   // the interfaces the pool sees, over this state
  std::unique_ptr<ordering> ord;

  explicit state(sim_options o) : opts(o), next_address(o.base_address) {
    if (!is_power_of_two(opts.granularity_bytes))
      throw std::invalid_argument(fmt::format("sim_device: granularity {} is not a power of two",
                                              opts.granularity_bytes));
  }

  // Refusal for capacity or a planned fault; counts as one upstream call.
  bool refuse(std::size_t bytes) {
    if (fail_all) return true;
    if (calls_until_failure && --calls_until_failure == 0) return true;
    return used + bytes > opts.capacity_bytes;
  }
  void take(std::size_t bytes) {
    used += bytes;
    if (used > peak_used) peak_used = used;
    ++creates;
  }
  std::uintptr_t carve_addresses(std::size_t bytes) {
    // Align every piece to the granule so the addresses look like the driver's.
    std::uintptr_t a = align_up(next_address, opts.granularity_bytes);
    next_address = a + bytes + opts.granularity_bytes;  // a gap: neighbours never touch by accident
    return a;
  }
};

namespace {

void sim_zero(sim_device::state& s, const sim_device& dev, void* p, std::size_t bytes);

class sim_upstream final : public upstream {
 public:
  sim_upstream(sim_device::state& s, const sim_device& dev) : s_(s), dev_(dev) {}
  bool can_zero() const noexcept override { return true; }
  void zero(void* p, std::size_t bytes, stream_ref) override { sim_zero(s_, dev_, p, bytes); }
  std::string name() const override { return "sim"; }
  std::size_t granularity() const noexcept override { return s_.opts.granularity_bytes; }
  bool supports_virtual() const noexcept override { return s_.opts.virtual_memory; }
  std::size_t capacity_bytes() const noexcept override { return s_.opts.capacity_bytes; }

  void* allocate_segment(std::size_t bytes) override {
    std::lock_guard lock(s_.m);
    if (bytes == 0 || bytes % s_.opts.granularity_bytes)
      throw std::invalid_argument(fmt::format("sim: segment of {} B is not a multiple of the {} B granule",
                                              bytes, s_.opts.granularity_bytes));
    if (s_.refuse(bytes)) return nullptr;
    s_.take(bytes);
    std::uintptr_t a = s_.carve_addresses(bytes);
    s_.segments.emplace(a, bytes);
    return reinterpret_cast<void*>(a);
  }
  void free_segment(void* base, std::size_t bytes) noexcept override {
    std::lock_guard lock(s_.m);
    auto it = s_.segments.find(reinterpret_cast<std::uintptr_t>(base));
    if (it == s_.segments.end() || it->second != bytes) {
      report_misuse({misuse_kind::unknown_pointer, base, bytes, it == s_.segments.end() ? 0 : it->second,
                     "sim: free_segment of a range that is not a segment of this device"});
      return;
    }
    s_.used -= bytes;
    s_.segments.erase(it);
  }

  void* reserve_range(std::size_t bytes) override {
    std::lock_guard lock(s_.m);
    if (!s_.opts.virtual_memory) throw std::logic_error("sim: virtual memory is off for this device");
    std::uintptr_t a = s_.carve_addresses(align_up(bytes, s_.opts.granularity_bytes));
    s_.ranges.emplace(a, bytes);
    return reinterpret_cast<void*>(a);
  }
  void release_range(void* base, std::size_t) noexcept override {
    std::lock_guard lock(s_.m);
    s_.ranges.erase(reinterpret_cast<std::uintptr_t>(base));
  }
  std::optional<physical_handle> create_physical(std::size_t bytes) override {
    std::lock_guard lock(s_.m);
    if (bytes == 0 || bytes % s_.opts.granularity_bytes)
      throw std::invalid_argument(fmt::format("sim: physical size {} B is not a multiple of the {} B granule",
                                              bytes, s_.opts.granularity_bytes));
    if (s_.refuse(bytes)) return std::nullopt;
    s_.take(bytes);
    std::uint64_t h = s_.next_handle;
    if (s_.opts.reuse_handle_values && !s_.released_values.empty()) {
      h = s_.released_values.back();
      s_.released_values.pop_back();
    } else {
      ++s_.next_handle;
    }
    s_.handles.emplace(h, sim_device::state::physical{bytes, s_.next_physical++});
    return physical_handle{h};
  }
  void release_physical(physical_handle h, std::size_t bytes) noexcept override {
    std::lock_guard lock(s_.m);
    auto it = s_.handles.find(h.value);
    if (it == s_.handles.end() || it->second.bytes != bytes) {
      report_misuse({misuse_kind::unknown_pointer, nullptr, bytes, 0,
                     fmt::format("sim: release of unknown physical handle {}", h.value)});
      return;
    }
    s_.used -= bytes;
    s_.handles.erase(it);
    // Its mappings stay, on the old memory, until unmapped (as cuMemRelease leaves them).
    if (s_.opts.reuse_handle_values) s_.released_values.push_back(h.value);
  }
  void map(void* at, std::size_t bytes, physical_handle h) override {
    std::lock_guard lock(s_.m);
    auto a = reinterpret_cast<std::uintptr_t>(at);
    if (a % s_.opts.granularity_bytes || bytes % s_.opts.granularity_bytes)
      throw std::invalid_argument("sim: map at an address or size that is not granule aligned");
    auto hit = s_.handles.find(h.value);
    if (hit == s_.handles.end() || hit->second.bytes != bytes)
      throw std::invalid_argument(fmt::format("sim: map of unknown handle {} or wrong size", h.value));
    auto next = s_.mappings.lower_bound(a);
    if ((next != s_.mappings.end() && next->first < a + bytes) ||
        (next != s_.mappings.begin() && std::prev(next)->first + std::prev(next)->second.bytes > a))
      throw std::logic_error(fmt::format("sim: map at {:#x} overlaps an existing mapping", a));
    s_.mappings.emplace(a, sim_device::state::mapping{bytes, h.value, hit->second.id});
  }
  // Like cuMemUnmap: the range is one mapping or several laid end to end, each covered whole.
  void unmap(void* at, std::size_t bytes) noexcept override {
    std::lock_guard lock(s_.m);
    const auto a = reinterpret_cast<std::uintptr_t>(at);
    auto first = s_.mappings.find(a), it = first;
    std::uintptr_t x = a;
    while (it != s_.mappings.end() && it->first == x && x < a + bytes) {
      x += it->second.bytes;
      ++it;
    }
    if (bytes == 0 || x != a + bytes) {
      report_misuse({misuse_kind::unknown_pointer, at, bytes, 0,
                     "sim: unmap of a range that is not whole mappings laid end to end"});
      return;
    }
    s_.mappings.erase(first, it);
  }

 private:
  sim_device::state& s_;
  const sim_device& dev_;
};

// Zeroing: the simulator backs no bytes, so it checks the range is memory it handed out and
// mapped, and counts it.
void sim_zero(sim_device::state& s, const sim_device& dev, void* p, std::size_t bytes) {
  if (!dev.is_mapped(p, bytes))
    throw std::logic_error(fmt::format("sim: zero of {} B at {} touches memory that is not mapped", bytes, p));
  std::lock_guard lock(s.m);
  s.zeroed_bytes += bytes;
  ++s.zero_calls;
}

class sim_ordering final : public ordering {
 public:
  explicit sim_ordering(sim_device::state& s) : s_(s) {}
  event_ref record(stream_ref st) override {
    std::lock_guard lock(s_.m);
    if (s_.destroyed.count(st))
      throw std::logic_error(fmt::format("sim: event recorded on stream {:#x} after it was destroyed", st.value()));
    auto& ss = s_.streams[st];
    std::uint64_t pos = ++ss.recorded;
    if (s_.opts.auto_complete) ss.done = pos;
    event_ref e = s_.next_event++;
    s_.events.emplace(e, sim_device::state::event_state{st, pos});
    ++s_.events_recorded;
    return e;
  }
  bool query(event_ref e) override {
    std::lock_guard lock(s_.m);
    const auto& ev = find(e);
    return s_.streams[ev.stream].done >= ev.position;
  }
  void synchronize(event_ref e) override {
    // The host waits: time passes until the stream has run that far.
    std::lock_guard lock(s_.m);
    const auto& ev = find(e);
    auto& ss = s_.streams[ev.stream];
    if (ss.done < ev.position) ss.done = ev.position;
  }
  void stream_wait(stream_ref st, event_ref e) override {
    std::lock_guard lock(s_.m);
    if (s_.destroyed.count(st))
      throw std::logic_error(fmt::format("sim: wait on stream {:#x} after it was destroyed", st.value()));
    find(e);  // the simulator runs no device work: the dependency has nothing to order
  }
  void release(event_ref e) noexcept override {
    std::lock_guard lock(s_.m);
    s_.events.erase(e);
  }

 private:
  const sim_device::state::event_state& find(event_ref e) {
    auto it = s_.events.find(e);
    if (it == s_.events.end()) throw std::invalid_argument(fmt::format("sim: unknown event {}", e));
    return it->second;
  }
  sim_device::state& s_;
};

}  // namespace

sim_device::sim_device(sim_options opts) : state_(nullptr) {
  // Past 1 PiB the pools' address ranges (4x the capacity) would run off the top of the simulated
  // address space; no device is near it, and "--capacity max" should be refused, not overflow.
  if (opts.capacity_bytes == 0 || opts.capacity_bytes > (std::size_t{1} << 50))
    throw std::invalid_argument(fmt::format(
        "gpumem::sim_device: capacity_bytes {} is not a device's size (more than 0, at most 1 PiB)", opts.capacity_bytes));
  if (!std::has_single_bit(opts.granularity_bytes))
    throw std::invalid_argument(
        fmt::format("gpumem::sim_device: granularity_bytes {} is not a power of two", opts.granularity_bytes));
  state_ = std::make_unique<state>(opts);
  state_->up = std::make_unique<sim_upstream>(*state_, *this);
  state_->ord = std::make_unique<sim_ordering>(*state_);
}
sim_device::~sim_device() = default;

upstream& sim_device::memory() noexcept { return *state_->up; }
ordering& sim_device::streams() noexcept { return *state_->ord; }

stream_ref sim_device::create_stream() {
  std::lock_guard lock(state_->m);
  stream_ref s{state_->next_stream};
  state_->next_stream += 0x10;
  state_->streams[s];
  return s;
}
void sim_device::destroy_stream(stream_ref s) {
  std::lock_guard lock(state_->m);
  state_->destroyed[s] = true;
}
void sim_device::complete(stream_ref s) {
  std::lock_guard lock(state_->m);
  auto& ss = state_->streams[s];
  ss.done = ss.recorded;
}
void sim_device::complete_all() {
  std::lock_guard lock(state_->m);
  for (auto& [s, ss] : state_->streams) ss.done = ss.recorded;
}
void sim_device::set_auto_complete(bool on) {
  std::lock_guard lock(state_->m);
  state_->opts.auto_complete = on;
  if (on)
    for (auto& [s, ss] : state_->streams) ss.done = ss.recorded;
}
void sim_device::fail_nth_call(std::uint64_t n) {
  std::lock_guard lock(state_->m);
  state_->calls_until_failure = n;
}
void sim_device::fail_every(bool on) {
  std::lock_guard lock(state_->m);
  state_->fail_all = on;
}
std::size_t sim_device::capacity_bytes() const noexcept { return state_->opts.capacity_bytes; }
std::size_t sim_device::used_bytes() const noexcept {
  std::lock_guard lock(state_->m);
  return state_->used;
}
std::size_t sim_device::peak_used_bytes() const noexcept {
  std::lock_guard lock(state_->m);
  return state_->peak_used;
}
std::uint64_t sim_device::upstream_calls() const noexcept {
  std::lock_guard lock(state_->m);
  return state_->creates;
}
std::uint64_t sim_device::events_recorded() const noexcept {
  std::lock_guard lock(state_->m);
  return state_->events_recorded;
}
std::uint64_t sim_device::zeroed_bytes() const noexcept {
  std::lock_guard lock(state_->m);
  return state_->zeroed_bytes;
}
std::uint64_t sim_device::events_pending() const noexcept {
  std::lock_guard lock(state_->m);
  std::uint64_t n = 0;
  for (const auto& [e, ev] : state_->events)
    if (state_->streams.at(ev.stream).done < ev.position) ++n;
  return n;
}
namespace {

// The mapping covering `a`, or null.
const sim_device::state::mapping* mapping_at(const sim_device::state& s, std::uintptr_t a) {
  auto it = s.mappings.upper_bound(a);
  if (it == s.mappings.begin()) return nullptr;
  --it;
  return a < it->first + it->second.bytes ? &it->second : nullptr;
}

// [p, p + bytes) lies in one segment, or every granule it touches is mapped (each mapping also
// `live`, when asked: of physical memory not released).
bool covered(const sim_device::state& s, const void* p, std::size_t bytes, bool live) {
  auto a = reinterpret_cast<std::uintptr_t>(p);
  if (auto it = s.segments.upper_bound(a); it != s.segments.begin()) {
    --it;
    if (a + bytes <= it->first + it->second) return true;
  }
  // A virtual range may be mapped granule by granule: walk the granules it covers.
  const std::size_t g = s.opts.granularity_bytes;
  for (std::uintptr_t x = a - a % g; x < a + bytes; x += g) {
    const auto* m = mapping_at(s, x);
    if (!m) return false;
    if (live) {
      auto h = s.handles.find(m->handle);
      if (h == s.handles.end() || h->second.id != m->id) return false;
    }
  }
  return bytes > 0;
}

}  // namespace

bool sim_device::is_mapped(const void* p, std::size_t bytes) const noexcept {
  std::lock_guard lock(state_->m);
  return covered(*state_, p, bytes, false);
}
bool sim_device::is_mapped_live(const void* p, std::size_t bytes) const noexcept {
  std::lock_guard lock(state_->m);
  return covered(*state_, p, bytes, true);
}
std::uint64_t sim_device::mapped_handle(const void* p) const noexcept {
  std::lock_guard lock(state_->m);
  const auto* m = mapping_at(*state_, reinterpret_cast<std::uintptr_t>(p));
  return m ? m->handle : 0;
}

}  // namespace gpumem
