// The CUDA implementation of memory_access: stream-ordered memset/copy, synchronized reads.
// Only built when the CUDA toolkit is found (src/cuda is globbed under GPUMEM_HAVE_CUDA).
#include <cuda_runtime_api.h>

#include <string>

#include "gpumem/errors.hpp"
#include "gpumem/memory_access.hpp"

namespace gpumem {
namespace {

// Every CUDA call is checked; a failure becomes a cuda_error naming the call, the code and its name.
void check(cudaError_t err, const char* call) {
  if (err == cudaSuccess) return;
  throw cuda_error(call, static_cast<int>(err), cudaGetErrorName(err), cudaGetErrorString(err));
}

cudaStream_t as_stream(stream_ref s) noexcept { return s.get(); }

class device_access final : public memory_access {
 public:
  std::string name() const override { return "device (cudaMemsetAsync/cudaMemcpyAsync)"; }

  void fill(void* dst, unsigned char value, std::size_t bytes, stream_ref s) override {
    if (bytes == 0) return;
    check(cudaMemsetAsync(dst, value, bytes, as_stream(s)), "cudaMemsetAsync");
  }

  void read(void* host_dst, const void* src, std::size_t bytes, stream_ref s) override {
    if (bytes == 0) return;
    // cudaMemcpyDefault: the pointer's kind (device, managed, pinned) is found by the runtime, so
    // one implementation serves every CUDA resource. The copy is ordered after the work on `s`.
    check(cudaMemcpyAsync(host_dst, src, bytes, cudaMemcpyDefault, as_stream(s)),
          "cudaMemcpyAsync");
    check(cudaStreamSynchronize(as_stream(s)), "cudaStreamSynchronize");
  }
};

}  // namespace

memory_access& device_memory_access() noexcept {
  static device_access access;
  return access;
}

}  // namespace gpumem
