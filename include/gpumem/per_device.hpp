#pragma once
// per_device<T>: one T per device, created on first use by a factory and chosen by the current
// device, as RMM's per_device_resource. CUDA-free: what "device" and "current" mean comes from the
// caller (the CUDA layer passes cudaGetDevice, the simulated devices their own per-thread choice),
// so the map and its thread safety are tested without a GPU.
//
// Lookups of a device whose T exists take no lock (one acquire load); the first use of a device
// takes the map's lock and calls the factory under it, so two threads never build the same
// device's T. A factory that throws leaves nothing behind: the next use tries again. Objects live
// as long as the map and never move, so references handed out stay valid.
#include <atomic>
#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

namespace gpumem {

template <class T>
class per_device {
 public:
  using factory = std::function<std::unique_ptr<T>(int device)>;
  using device_query = std::function<int()>;

  // `device_count` devices, indices 0..device_count-1. `current` answers which device the calling
  // thread is on; `make` builds a device's T, with that device current when the caller's query
  // makes it so (the map itself switches nothing).
  per_device(int device_count, factory make, device_query current)
      : make_(std::move(make)), current_(std::move(current)),
        slots_(device_count > 0 ? static_cast<std::size_t>(device_count) : 0),
        owned_(slots_.size()) {
    if (device_count <= 0)
      throw std::invalid_argument("per_device: device count " + std::to_string(device_count) +
                                  " is not positive (a map needs at least one device)");
    if (!make_) throw std::invalid_argument("per_device: no factory given");
    if (!current_) throw std::invalid_argument("per_device: no current-device query given");
  }
  per_device(const per_device&) = delete;
  per_device& operator=(const per_device&) = delete;

  int device_count() const noexcept { return static_cast<int>(slots_.size()); }

  // The T of `device`, built on first use. Throws std::out_of_range for an index outside
  // [0, device_count), std::logic_error when the factory returns nothing, else what it throws.
  T& get(int device) {
    check(device, "get");
    if (T* t = slots_[static_cast<std::size_t>(device)].load(std::memory_order_acquire)) return *t;
    std::lock_guard lock(mutex_);
    auto& slot = slots_[static_cast<std::size_t>(device)];
    if (T* t = slot.load(std::memory_order_relaxed)) return *t;
    std::unique_ptr<T> made = make_(device);
    if (!made)
      throw std::logic_error("per_device: the factory returned no object for device " +
                             std::to_string(device));
    T* t = made.get();
    owned_[static_cast<std::size_t>(device)] = std::move(made);
    slot.store(t, std::memory_order_release);
    return *t;
  }

  // The T of the calling thread's current device.
  T& current() { return get(current_device()); }
  int current_device() const {
    const int d = current_();
    check(d, "current device");
    return d;
  }

  // The T of `device` if it was built, else nullptr; never builds one. nullptr for a bad index.
  T* find(int device) const noexcept {
    if (device < 0 || device >= device_count()) return nullptr;
    return slots_[static_cast<std::size_t>(device)].load(std::memory_order_acquire);
  }

  // Calls f(device, T&) for every T built so far, in device order.
  template <class F>
  void for_each(F&& f) const {
    for (int d = 0; d < device_count(); ++d)
      if (T* t = find(d)) f(d, *t);
  }

 private:
  void check(int device, const char* what) const {
    if (device < 0 || device >= device_count())
      throw std::out_of_range("per_device::" + std::string(what) + ": device " +
                              std::to_string(device) + " is outside [0, " +
                              std::to_string(device_count()) + ") (the devices this map was made for)");
  }

  factory make_;
  device_query current_;
  std::vector<std::atomic<T*>> slots_;
  std::vector<std::unique_ptr<T>> owned_;  // under mutex_
  std::mutex mutex_;
};

}  // namespace gpumem
