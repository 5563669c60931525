#include "capture_mode.hpp"

#include <fmt/core.h>

#include <stdexcept>
#include <string>

namespace gpumem::detail {

unsigned long long capture_id_of(cudaStream_t s) noexcept {
  cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
  unsigned long long id = 0;
  relaxed_capture_mode relax;
  if (cudaStreamGetCaptureInfo(s, &st, &id) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return st == cudaStreamCaptureStatusActive ? id : 0;
}

void refuse_capturing_stream(cudaStream_t s, const char* what) {
  if (const unsigned long long id = capture_id_of(s))
    throw std::logic_error(fmt::format(
        "gpumem: the pool was about to {} stream {} while it captures a CUDA graph (capture id {}), and no graph "
        "pool scope was begun for it. Call gpu_pool::begin_capture(stream, graph_pool) before the capture and "
        "end_capture(stream) after it (gpumem.torch.use() does this for torch.cuda.graph)",
        what, static_cast<const void*>(s), id));
}

namespace {

class relaxed_upstream final : public upstream {
 public:
  explicit relaxed_upstream(upstream& in) : in_(in) {}
  std::string name() const override { return in_.name(); }
  std::size_t granularity() const noexcept override { return in_.granularity(); }
  bool supports_virtual() const noexcept override { return in_.supports_virtual(); }
  std::size_t capacity_bytes() const noexcept override { return in_.capacity_bytes(); }
  void* allocate_segment(std::size_t bytes) override {
    relaxed_capture_mode r;
    return in_.allocate_segment(bytes);
  }
  void free_segment(void* base, std::size_t bytes) noexcept override {
    relaxed_capture_mode r;
    in_.free_segment(base, bytes);
  }
  void* reserve_range(std::size_t bytes) override {
    relaxed_capture_mode r;
    return in_.reserve_range(bytes);
  }
  void release_range(void* base, std::size_t bytes) noexcept override {
    relaxed_capture_mode r;
    in_.release_range(base, bytes);
  }
  std::optional<physical_handle> create_physical(std::size_t bytes) override {
    relaxed_capture_mode r;
    return in_.create_physical(bytes);
  }
  void release_physical(physical_handle h, std::size_t bytes) noexcept override {
    relaxed_capture_mode r;
    in_.release_physical(h, bytes);
  }
  void map(void* at, std::size_t bytes, physical_handle h) override {
    relaxed_capture_mode r;
    in_.map(at, bytes, h);
  }
  void map_run(void* at, std::size_t bytes_each, const physical_handle* handles, std::size_t count) override {
    relaxed_capture_mode r;
    in_.map_run(at, bytes_each, handles, count);
  }
  void unmap(void* at, std::size_t bytes) noexcept override {
    relaxed_capture_mode r;
    in_.unmap(at, bytes);
  }
  bool can_zero() const noexcept override { return in_.can_zero(); }
  void zero(void* p, std::size_t bytes, stream_ref s) override {
    refuse_capturing_stream(s.get(), "zero freed memory on");
    in_.zero(p, bytes, s);
  }

 private:
  upstream& in_;
};

}  // namespace

std::unique_ptr<upstream> capture_relaxed(upstream& inner) { return std::make_unique<relaxed_upstream>(inner); }

}  // namespace gpumem::detail
