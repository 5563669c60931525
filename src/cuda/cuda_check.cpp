#include "cuda_check.hpp"

#include <fmt/core.h>

#include "driver_api.hpp"
#include "gpumem/errors.hpp"

namespace gpumem::cuda_detail {

namespace {
// Only the file's base name: the full build path says nothing to a user.
const char* base_name(const char* path) {
  const char* base = path;
  for (const char* p = path; *p; ++p)
    if (*p == '/') base = p + 1;
  return base;
}
}  // namespace

void throw_runtime_error(const char* call, cudaError_t code, const char* file, int line) {
  // Sticky errors stay; a plain failure is cleared so later calls don't report it again.
  if (code != cudaErrorIllegalAddress && code != cudaErrorLaunchFailure) (void)cudaGetLastError();
  const char* name = cudaGetErrorName(code);
  const char* text = cudaGetErrorString(code);
  throw cuda_error(call, static_cast<int>(code), name ? name : "unknown",
                   fmt::format("{} failed at {}:{}: {} ({}): {}", call, base_name(file), line,
                               name ? name : "unknown", static_cast<int>(code),
                               text ? text : "no description"));
}

std::string driver_error_name(CUresult code) {
  if (const driver_api* d = driver_if_available(); d && d->get_error_name) {
    const char* name = nullptr;
    if (d->get_error_name(code, &name) == CUDA_SUCCESS && name) return name;
  }
  return fmt::format("CUresult {}", static_cast<int>(code));
}

void throw_driver_error(const char* call, CUresult code, const char* file, int line) {
  const std::string name = driver_error_name(code);
  throw cuda_error(call, static_cast<int>(code), name,
                   fmt::format("{} failed at {}:{}: {} ({})", call, base_name(file), line, name,
                               static_cast<int>(code)));
}

}  // namespace gpumem::cuda_detail
