#pragma once
// CUDA graph capture and the pool's own CUDA calls.
//
// While a stream captures in cudaStreamCaptureModeGlobal (PyTorch's default), calls that may
// synchronize — cudaMalloc, event queries, the VMM driver calls — fail from every thread that has
// not relaxed its own mode, and invalidate the capture. The pool makes such calls on its slow path
// for other streams and for a graph pool while a capture is underway; each runs under
// relaxed_capture_mode, as PyTorch's caching allocator does around cudaMalloc.
#include <cuda_runtime_api.h>

#include <memory>

#include "gpumem/upstream.hpp"

namespace gpumem::detail {

class relaxed_capture_mode {
 public:
  relaxed_capture_mode() noexcept { (void)cudaThreadExchangeStreamCaptureMode(&mode_); }
  ~relaxed_capture_mode() { (void)cudaThreadExchangeStreamCaptureMode(&mode_); }
  relaxed_capture_mode(const relaxed_capture_mode&) = delete;
  relaxed_capture_mode& operator=(const relaxed_capture_mode&) = delete;

 private:
  cudaStreamCaptureMode mode_ = cudaStreamCaptureModeRelaxed;
};

// The capture id of the capture `s` takes part in, 0 if none.
unsigned long long capture_id_of(cudaStream_t s) noexcept;

// Throws std::logic_error when `s` captures: the pool was about to `what` it (record an event on
// it, make it wait), which would put the pool's bookkeeping into the graph.
void refuse_capturing_stream(cudaStream_t s, const char* what);

// Forwards every call to `inner` under relaxed_capture_mode (gpu_pool's pool sees this one).
std::unique_ptr<upstream> capture_relaxed(upstream& inner);

}  // namespace gpumem::detail
