#pragma once
// Several simulated GPUs in one process, each with its own capacity, address space and streams,
// and a current device per thread as cudaSetDevice keeps one: what a per-device pool map
// (gpumem::per_device) is tested on without hardware.
#include <memory>
#include <vector>

#include "gpumem/pool.hpp"
#include "gpumem/per_device.hpp"
#include "gpumem/sim_device.hpp"

namespace gpumem {

class sim_devices {
 public:
  // One device per entry, each with its own capacity and granularity. Device i's base_address is
  // moved far past device i-1's, so their addresses lie apart. Throws std::invalid_argument for an
  // empty list.
  explicit sim_devices(std::vector<sim_options> devices);
  ~sim_devices();
  sim_devices(const sim_devices&) = delete;
  sim_devices& operator=(const sim_devices&) = delete;

  int count() const noexcept;
  // Throws std::out_of_range naming the index and the count.
  sim_device& device(int index);

  // The calling thread's current device (0 until it sets one), per set of devices and thread.
  int current() const noexcept;
  // Throws std::out_of_range for an index outside [0, count()).
  void set_current(int index);

  // The device that handed out the memory at `p` (mapped or a segment), -1 if none.
  int device_of(const void* p) const noexcept;

  // One pool per device on that device's memory and streams, chosen by current(); each built on
  // first use with `opts`.
  std::unique_ptr<per_device<pool>> make_pools(pool_options opts = {});

  struct state;

 private:
  std::unique_ptr<state> state_;
};

}  // namespace gpumem
