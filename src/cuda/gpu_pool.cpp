#include "gpumem/cuda/gpu_pool.hpp"

#include <utility>

#include "capture_mode.hpp"
#include "gpumem/cuda/upstreams.hpp"
#include "gpumem/detail/pool_tuning.hpp"

namespace gpumem {

// Members in construction order: the pool is destroyed first, while its upstream and ordering
// still exist to take back what it holds.
struct gpu_pool::state {
  std::unique_ptr<upstream> up;
  std::unique_ptr<upstream> relaxed;  // `up` as the pool sees it (capture_mode.hpp)
  cuda_ordering ord;
  std::unique_ptr<gpumem::pool> p;

  state(const gpu_pool_options& o, const detail::pool_tuning& tuning) {
    switch (o.upstream) {
      case gpu_upstream_kind::vmm: up = std::make_unique<vmm_upstream>(o.device, o.shareable); break;
      case gpu_upstream_kind::device: up = std::make_unique<device_upstream>(o.device); break;
      case gpu_upstream_kind::async: {
        async_pool_options a = o.async;
        if (a.device < 0) a.device = o.device;
        up = std::make_unique<async_upstream>(a);
        break;
      }
    }
    relaxed = detail::capture_relaxed(*up);
    p = std::make_unique<gpumem::pool>(*relaxed, ord, o.pool, tuning);
  }
  ~state() { p.reset(); }
};

gpu_pool::gpu_pool(gpu_pool_options opts) : gpu_pool(std::move(opts), detail::pool_tuning{}) {}
gpu_pool::gpu_pool(gpu_pool_options opts, const detail::pool_tuning& tuning)
    : state_(std::make_shared<state>(opts, tuning)), pool_(state_->p.get()) {}

upstream& gpu_pool::memory() const noexcept { return *state_->up; }

}  // namespace gpumem
