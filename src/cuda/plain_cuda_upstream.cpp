// The plain-shape CUDA upstreams' shared members (device_upstream, async_upstream).
#include "device_util.hpp"
#include "gpumem/cuda/upstreams.hpp"

namespace gpumem {

void* plain_cuda_upstream::reserve_range(std::size_t) { cuda_detail::no_virtual_shape(name(), "reserve_range"); }
std::optional<physical_handle> plain_cuda_upstream::create_physical(std::size_t) {
  cuda_detail::no_virtual_shape(name(), "create_physical");
}
void plain_cuda_upstream::map(void*, std::size_t, physical_handle) { cuda_detail::no_virtual_shape(name(), "map"); }
void plain_cuda_upstream::zero(void* p, std::size_t bytes, stream_ref s) { cuda_detail::zero_async(p, bytes, s); }

}  // namespace gpumem
