// Several simulated devices and a per-thread current device.
#include "gpumem/sim_devices.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <unordered_map>

namespace gpumem {

namespace {
// Where device i+1's addresses start past device i's: its capacity times this (a virtual pool
// reserves several times the device, pool_tuning::address_range_bytes) plus 1 TiB, so the
// spaces look apart; which device holds an address is asked of the devices themselves.
constexpr std::size_t address_factor = 16;
constexpr std::size_t address_gap = std::size_t{1} << 40;
}  // namespace

struct sim_devices::state {
  std::vector<std::unique_ptr<sim_device>> devices;
  // Current device per thread. A map keyed by thread, not a thread_local, so that two sets of
  // devices in one process keep their own choices.
  mutable std::mutex m;
  std::unordered_map<std::thread::id, int> current;
};

sim_devices::sim_devices(std::vector<sim_options> devices) : state_(std::make_unique<state>()) {
  if (devices.empty())
    throw std::invalid_argument("sim_devices: no devices given (the list needs at least one sim_options)");
  std::uintptr_t next = devices.front().base_address;
  for (std::size_t i = 0; i < devices.size(); ++i) {
    sim_options o = devices[i];
    o.base_address = std::max(o.base_address, next);
    o.base_address = align_up(o.base_address, std::size_t{1} << 30);
    state_->devices.push_back(std::make_unique<sim_device>(o));
    next = o.base_address + o.capacity_bytes * address_factor + address_gap;
  }
}

sim_devices::~sim_devices() = default;

int sim_devices::count() const noexcept { return static_cast<int>(state_->devices.size()); }

sim_device& sim_devices::device(int index) {
  if (index < 0 || index >= count())
    throw std::out_of_range(fmt::format("sim_devices::device: index {} is outside [0, {})", index, count()));
  return *state_->devices[static_cast<std::size_t>(index)];
}

int sim_devices::current() const noexcept {
  std::lock_guard lock(state_->m);
  const auto it = state_->current.find(std::this_thread::get_id());
  return it == state_->current.end() ? 0 : it->second;
}

void sim_devices::set_current(int index) {
  if (index < 0 || index >= count())
    throw std::out_of_range(fmt::format("sim_devices::set_current: device {} is outside [0, {})", index, count()));
  std::lock_guard lock(state_->m);
  state_->current[std::this_thread::get_id()] = index;
}

int sim_devices::device_of(const void* p) const noexcept {
  for (std::size_t i = 0; i < state_->devices.size(); ++i)
    if (state_->devices[i]->is_mapped(p, 1)) return static_cast<int>(i);
  return -1;
}

std::unique_ptr<per_device<pool>> sim_devices::make_pools(pool_options opts) {
  return std::make_unique<per_device<pool>>(
      count(),
      [this, opts](int d) {
        sim_device& dev = device(d);
        return std::make_unique<pool>(dev.memory(), dev.streams(), opts);
      },
      [this] { return current(); });
}

}  // namespace gpumem
