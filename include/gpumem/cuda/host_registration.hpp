#pragma once
// host_registration: RAII over cudaHostRegister / cudaHostUnregister. Pins an existing host range
// for the lifetime of the object. Move-only: exactly one owner unregisters, so a registration never
// leaks and is never undone twice.
#include <cuda_runtime_api.h>

#include <cstddef>

namespace gpumem {

class host_registration {
 public:
  host_registration() noexcept = default;
  // Throws std::invalid_argument (null pointer or zero bytes), cuda_error — with a message that
  // says so when the range (or part of it) is already registered
  // (cudaErrorHostMemoryAlreadyRegistered).
  host_registration(void* p, std::size_t bytes, unsigned int flags = cudaHostRegisterDefault);
  ~host_registration();
  host_registration(host_registration&& o) noexcept;
  host_registration& operator=(host_registration&& o) noexcept;
  host_registration(const host_registration&) = delete;
  host_registration& operator=(const host_registration&) = delete;

  void* data() const noexcept { return ptr_; }
  std::size_t size() const noexcept { return bytes_; }
  explicit operator bool() const noexcept { return ptr_ != nullptr; }
  // Unregisters now (idempotent).
  void reset() noexcept;

 private:
  void* ptr_ = nullptr;
  std::size_t bytes_ = 0;
};

}  // namespace gpumem
