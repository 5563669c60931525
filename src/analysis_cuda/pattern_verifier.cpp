#include "pattern_verifier.hpp"

#include <cuda_runtime_api.h>

#include "cuda_check.hpp"
#include "pattern_kernels.hpp"

namespace gpumem::cuda_detail {
namespace {

cudaStream_t to_cuda(stream_ref s) { return s.get(); }

class pattern_verifier final : public replay_verifier {
 public:
  pattern_verifier() {
    void* counter = nullptr;
    GPUMEM_CUDA_CHECK(cudaMalloc(&counter, sizeof(*counter_)));
    counter_ = static_cast<unsigned long long*>(counter);
    GPUMEM_CUDA_CHECK(cudaMemset(counter_, 0, sizeof(*counter_)));
    GPUMEM_CUDA_CHECK(cudaEventCreateWithFlags(&stamped_, cudaEventDisableTiming));
  }
  ~pattern_verifier() override {
    // Checks may still be running and reading the counter; no throwing from here.
    (void)cudaDeviceSynchronize();
    (void)cudaEventDestroy(stamped_);
    (void)cudaFree(counter_);
  }
  pattern_verifier(const pattern_verifier&) = delete;
  pattern_verifier& operator=(const pattern_verifier&) = delete;

  void stamp(void* p, std::size_t bytes, std::uint64_t tag, stream_ref s) override {
    launch_stamp(p, bytes, tag, to_cuda(s));
  }

  void check(const void* p, std::size_t bytes, std::uint64_t tag, stream_ref stamped_on, stream_ref s) override {
    // A block freed on another stream than it was stamped on: the check must not overtake the stamp.
    // The wait takes the event as recorded now, so one event serves every handoff.
    if (stamped_on != s) {
      GPUMEM_CUDA_CHECK(cudaEventRecord(stamped_, to_cuda(stamped_on)));
      GPUMEM_CUDA_CHECK(cudaStreamWaitEvent(to_cuda(s), stamped_, 0));
    }
    launch_check(p, bytes, tag, counter_, to_cuda(s));
  }

  std::uint64_t mismatched_words() override {
    GPUMEM_CUDA_CHECK(cudaDeviceSynchronize());  // every check enqueued so far has counted
    unsigned long long words = 0;
    GPUMEM_CUDA_CHECK(cudaMemcpy(&words, counter_, sizeof(words), cudaMemcpyDeviceToHost));
    return words;
  }

 private:
  unsigned long long* counter_ = nullptr;
  cudaEvent_t stamped_ = nullptr;
};

}  // namespace

std::unique_ptr<replay_verifier> make_pattern_verifier() { return std::make_unique<pattern_verifier>(); }

}  // namespace gpumem::cuda_detail
