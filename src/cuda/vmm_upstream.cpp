#include <cstdio>

#include "cuda_check.hpp"
#include "device_util.hpp"
#include "driver_api.hpp"
#include "gpumem/cuda/upstreams.hpp"

namespace gpumem {

using namespace cuda_detail;

namespace {
CUmemAllocationProp pinned_device_memory(int device) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  return prop;
}
CUdeviceptr as_device_ptr(void* p) { return reinterpret_cast<CUdeviceptr>(p); }
}  // namespace

vmm_upstream::vmm_upstream(int device, bool shareable) : device_(resolve_device(device)) {
  const driver_api& d = driver();
  CUdevice dev = 0;
  GPUMEM_CU_CHECK(d.device_get(&dev, device_));
  int vmm_supported = 0;
  GPUMEM_CU_CHECK(d.device_get_attribute(
      &vmm_supported, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, dev));
  if (!vmm_supported)
    throw cuda_error("cuDeviceGetAttribute(VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED)",
                     static_cast<int>(CUDA_ERROR_NOT_SUPPORTED), "CUDA_ERROR_NOT_SUPPORTED",
                     "this device does not support virtual memory management (cuMemMap)");
  const CUmemAllocationProp prop = pinned_device_memory(device_);
  GPUMEM_CU_CHECK(d.mem_get_allocation_granularity(&granularity_, &prop,
                                                   CU_MEM_ALLOC_GRANULARITY_MINIMUM));
  capacity_ = device_total_bytes(device_);
  int fd_supported = 0;
  GPUMEM_CU_CHECK(d.device_get_attribute(
      &fd_supported, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED, dev));
  if (!shareable)
    unshareable_reason_ = "the pool was made with shareable handles off (gpu_pool_options::shareable)";
  else if (!fd_supported)
    unshareable_reason_ = "the device does not export memory as POSIX file descriptors "
                          "(CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED is 0)";
  records_handles_ = shareable && fd_supported;
  shareable_.store(records_handles_, std::memory_order_release);
}

std::string vmm_upstream::unshareable_reason() const {
  std::lock_guard lock(handles_mutex_);
  return unshareable_reason_;
}

std::size_t vmm_upstream::handle_bytes(std::uint64_t value) const {
  std::lock_guard lock(handles_mutex_);
  const auto it = handle_bytes_.find(value);
  return it == handle_bytes_.end() ? 0 : it->second;
}

void* vmm_upstream::allocate_segment(std::size_t) { no_plain_shape(name(), "allocate_segment"); }

void* vmm_upstream::reserve_range(std::size_t bytes) {
  CUdeviceptr base = 0;
  GPUMEM_CU_CHECK(driver().mem_address_reserve(&base, align_up(bytes, granularity_), granularity_, 0, 0));
  return reinterpret_cast<void*>(base);
}

void vmm_upstream::release_range(void* base, std::size_t bytes) noexcept {
  const CUresult rc = driver().mem_address_free(as_device_ptr(base), align_up(bytes, granularity_));
  if (rc != CUDA_SUCCESS)
    std::fprintf(stderr, "gpumem: vmm_upstream: cuMemAddressFree(%p) failed: %s\n", base,
                 driver_error_name(rc).c_str());
}

std::optional<physical_handle> vmm_upstream::create_physical(std::size_t bytes) {
  CUmemAllocationProp prop = pinned_device_memory(device_);
  const bool share = shareable();
  if (share) prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  CUmemGenericAllocationHandle h = 0;
  CUresult rc = driver().mem_create(&h, bytes, &prop, 0);
  if (share && (rc == CUDA_ERROR_NOT_SUPPORTED || rc == CUDA_ERROR_NOT_PERMITTED ||
                rc == CUDA_ERROR_INVALID_VALUE)) {
    // The driver refuses exportable handles here (some containers do): plain ones from now on.
    {
      std::lock_guard lock(handles_mutex_);
      unshareable_reason_ = "cuMemCreate refused exportable handles (" + driver_error_name(rc) +
                            "); the pool's memory since then is not shareable";
    }
    shareable_.store(false, std::memory_order_release);
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_NONE;
    rc = driver().mem_create(&h, bytes, &prop, 0);
  }
  if (rc == CUDA_ERROR_OUT_OF_MEMORY) return std::nullopt;
  GPUMEM_CU_CHECK(rc);
  if (prop.requestedHandleTypes != CU_MEM_HANDLE_TYPE_NONE) {
    try {
      std::lock_guard lock(handles_mutex_);
      handle_bytes_[static_cast<std::uint64_t>(h)] = bytes;
    } catch (...) {
      (void)driver().mem_release(h);
      throw;
    }
  }
  physical_bytes_ += bytes;
  return physical_handle{static_cast<std::uint64_t>(h)};
}

void vmm_upstream::release_physical(physical_handle h, std::size_t bytes) noexcept {
  if (records_handles_) {
    std::lock_guard lock(handles_mutex_);
    handle_bytes_.erase(h.value);
  }
  const CUresult rc = driver().mem_release(static_cast<CUmemGenericAllocationHandle>(h.value));
  if (rc != CUDA_SUCCESS) {
    std::fprintf(stderr, "gpumem: vmm_upstream: cuMemRelease failed: %s\n",
                 driver_error_name(rc).c_str());
    return;
  }
  physical_bytes_ -= bytes;
}

void vmm_upstream::map(void* at, std::size_t bytes, physical_handle h) { map_run(at, bytes, &h, 1); }

// A run of handles at consecutive places: one cuMemMap each (a mapping covers one whole handle),
// then one cuMemSetAccess for the whole run — as NVIDIA's vectorAddMMAP sample does for its
// stripes — instead of one per handle. All or none: a failure unmaps what this call mapped.
void vmm_upstream::map_run(void* at, std::size_t bytes_each, const physical_handle* handles, std::size_t count) {
  if (count == 0) return;
  const driver_api& d = driver();
  const CUdeviceptr base = as_device_ptr(at);
  std::size_t done = 0;
  auto undo = [&] {
    if (done) (void)d.mem_unmap(base, done * bytes_each);  // whole mappings laid end to end
  };
  for (; done < count; ++done) {
    const CUresult rc = d.mem_map(base + done * bytes_each, bytes_each, 0,
                                  static_cast<CUmemGenericAllocationHandle>(handles[done].value), 0);
    if (rc != CUDA_SUCCESS) {
      undo();
      GPUMEM_CU_CHECK(rc);
    }
  }
  CUmemAccessDesc access{};
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = device_;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  const CUresult rc = d.mem_set_access(base, count * bytes_each, &access, 1);
  if (rc != CUDA_SUCCESS) {
    undo();  // never leave a mapping the device can't use
    GPUMEM_CU_CHECK(rc);
  }
  mapped_bytes_ += count * bytes_each;
}

void vmm_upstream::unmap(void* at, std::size_t bytes) noexcept {
  // cuMemUnmap waits for nothing: the pool only unmaps ranges no pending work can touch. One call
  // covers a run of whole mappings laid end to end (the pool's batched harvest).
  const CUresult rc = driver().mem_unmap(as_device_ptr(at), bytes);
  if (rc != CUDA_SUCCESS) {
    std::fprintf(stderr, "gpumem: vmm_upstream: cuMemUnmap(%p, %zu) failed: %s\n", at, bytes,
                 driver_error_name(rc).c_str());
    return;
  }
  mapped_bytes_ -= bytes;
}

}  // namespace gpumem

namespace gpumem {
void vmm_upstream::zero(void* p, std::size_t bytes, stream_ref s) { cuda_detail::zero_async(p, bytes, s); }
}  // namespace gpumem
