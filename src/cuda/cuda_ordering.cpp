#include <cstdio>

#include "capture_mode.hpp"
#include "cuda_check.hpp"
#include "gpumem/cuda/upstreams.hpp"

namespace gpumem {

namespace {
cudaEvent_t as_event(event_ref e) noexcept { return reinterpret_cast<cudaEvent_t>(e); }
}  // namespace

cuda_ordering::~cuda_ordering() {
  // Events still held by a pool are that pool's to release; only the recycled ones are ours.
  for (cudaEvent_t e : free_) (void)cudaEventDestroy(e);
}

// An event recorded on a capturing stream would join the graph instead of marking the stream's
// progress: the pool never records one there (a graph pool scope keeps it off such streams), and
// refuses to where no scope was begun. The calls that may synchronize relax the thread's capture
// mode (capture_mode.hpp).
event_ref cuda_ordering::record(stream_ref s) {
  detail::refuse_capturing_stream(to_cuda_stream(s), "record an event on");
  cudaEvent_t e = nullptr;
  {
    std::lock_guard lock(mutex_);
    if (!free_.empty()) {
      e = free_.back();
      free_.pop_back();
    }
  }
  if (!e) {
    GPUMEM_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    ++created_;
  }
  const cudaError_t rc = cudaEventRecord(e, to_cuda_stream(s));
  if (rc != cudaSuccess) {
    release(reinterpret_cast<event_ref>(e));
    GPUMEM_CUDA_CHECK(rc);
  }
  return reinterpret_cast<event_ref>(e);
}

bool cuda_ordering::query(event_ref e) {
  detail::relaxed_capture_mode relax;
  const cudaError_t rc = cudaEventQuery(as_event(e));
  if (rc == cudaSuccess) return true;
  if (rc == cudaErrorNotReady) return false;  // an answer, not an error
  GPUMEM_CUDA_CHECK(rc);
  return false;
}

void cuda_ordering::synchronize(event_ref e) {
  detail::relaxed_capture_mode relax;
  GPUMEM_CUDA_CHECK(cudaEventSynchronize(as_event(e)));
}

void cuda_ordering::stream_wait(stream_ref s, event_ref e) {
  detail::refuse_capturing_stream(to_cuda_stream(s), "make wait");
  GPUMEM_CUDA_CHECK(cudaStreamWaitEvent(to_cuda_stream(s), as_event(e), 0));
}

void cuda_ordering::release(event_ref e) noexcept {
  // Re-recording a released event later is safe: cudaEventRecord replaces the previous capture.
  try {
    std::lock_guard lock(mutex_);
    free_.push_back(as_event(e));
  } catch (...) {
    (void)cudaEventDestroy(as_event(e));  // out of host memory for the list: just drop it
  }
}

}  // namespace gpumem
