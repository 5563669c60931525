#pragma once
// Every CUDA call goes through one of these checks, so a failure always names the call, the
// numeric code and the code's name. Runtime calls (cudaError_t) and driver calls (CUresult) each
// have their own macro because their names are looked up differently.
#include <cuda.h>
#include <cuda_runtime_api.h>

#include <string>

#include "gpumem/errors.hpp"

namespace gpumem::cuda_detail {

[[noreturn]] void throw_runtime_error(const char* call, cudaError_t code, const char* file, int line);
[[noreturn]] void throw_driver_error(const char* call, CUresult code, const char* file, int line);

// The driver's own name for a code ("CUDA_ERROR_OUT_OF_MEMORY"), or "CUresult <n>" when the
// driver cannot be reached to ask.
std::string driver_error_name(CUresult code);

}  // namespace gpumem::cuda_detail

// Throws gpumem::cuda_error unless the runtime call returns cudaSuccess.
#define GPUMEM_CUDA_CHECK(call)                                                          \
  do {                                                                                   \
    const cudaError_t gpumem_status_ = (call);                                           \
    if (gpumem_status_ != cudaSuccess)                                                   \
      ::gpumem::cuda_detail::throw_runtime_error(#call, gpumem_status_, __FILE__, __LINE__); \
  } while (0)

// Throws gpumem::cuda_error unless the driver call returns CUDA_SUCCESS.
#define GPUMEM_CU_CHECK(call)                                                            \
  do {                                                                                   \
    const CUresult gpumem_status_ = (call);                                              \
    if (gpumem_status_ != CUDA_SUCCESS)                                                  \
      ::gpumem::cuda_detail::throw_driver_error(#call, gpumem_status_, __FILE__, __LINE__); \
  } while (0)
