#include "gpumem/cuda/host_registration.hpp"

#include <fmt/core.h>

#include <cstdio>
#include <stdexcept>
#include <utility>

#include "cuda_check.hpp"
#include "pinned_counter.hpp"
#include "gpumem/errors.hpp"

namespace gpumem {

host_registration::host_registration(void* p, std::size_t bytes, unsigned int flags) {
  if (!p || bytes == 0)
    throw std::invalid_argument(fmt::format(
        "host_registration: cannot register {} bytes at {}: need a non-null pointer and a size",
        bytes, p));
  const cudaError_t rc = cudaHostRegister(p, bytes, flags);
  if (rc == cudaErrorHostMemoryAlreadyRegistered) {
    (void)cudaGetLastError();
    throw cuda_error("cudaHostRegister", static_cast<int>(rc), cudaGetErrorName(rc),
                     fmt::format("host_registration: [{}, +{} B) overlaps a range that is already "
                                 "registered (another host_registration or cudaHostRegister holds "
                                 "it); register each range once", p, bytes));
  }
  GPUMEM_CUDA_CHECK(rc);
  ptr_ = p;
  bytes_ = bytes;
  cuda_detail::pinned_counter() += bytes;
}

host_registration::~host_registration() { reset(); }

host_registration::host_registration(host_registration&& o) noexcept
    : ptr_(std::exchange(o.ptr_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}

host_registration& host_registration::operator=(host_registration&& o) noexcept {
  if (this != &o) {
    reset();
    ptr_ = std::exchange(o.ptr_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
  }
  return *this;
}

void host_registration::reset() noexcept {
  if (!ptr_) return;
  const cudaError_t rc = cudaHostUnregister(ptr_);
  if (rc != cudaSuccess)
    std::fprintf(stderr, "gpumem: host_registration: cudaHostUnregister(%p) failed: %s\n", ptr_,
                 cudaGetErrorName(rc));
  cuda_detail::pinned_counter() -= bytes_;
  ptr_ = nullptr;
  bytes_ = 0;
}

}  // namespace gpumem
