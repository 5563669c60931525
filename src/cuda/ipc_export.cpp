// gpu_pool::export_block: a live block as the handle another process imports (cuda/ipc.hpp).
//
// On the VMM upstream the pool maps each physical handle whole, at granule-aligned places, and a
// block's granules lie in handles mapped end to end. The driver says which handle is mapped at an
// address (cuMemRetainAllocationHandle, the value used when mapping) and the upstream knows each
// handle's size, so the pieces under a block are found from its first granule: back to where that
// handle's mapping starts, then forward one whole handle at a time past the block's end.
#include <unistd.h>

#include <fmt/format.h>

#include <cstring>
#include <stdexcept>

#include "cuda_check.hpp"
#include "device_util.hpp"
#include "driver_api.hpp"
#include "gpumem/cuda/ipc.hpp"
#include "gpumem/cuda/upstreams.hpp"

namespace gpumem {

using namespace cuda_detail;

namespace {

[[noreturn]] void refuse(const std::string& why) {
  throw std::invalid_argument("gpumem ipc: export_block: " + why);
}

// What every handle says: its kind, the exporter, and the block's size and offset in what it names.
ipc_handle handle_of(ipc_kind kind, int device, std::uint64_t bytes, std::uint64_t offset) {
  ipc_handle out;
  out.kind = kind;
  out.device = device;
  out.exporter_pid = static_cast<std::uint32_t>(::getpid());
  out.bytes = bytes;
  out.offset = offset;
  return out;
}

// A handle taken with cuMemRetainAllocationHandle, released when done.
struct retained {
  CUmemGenericAllocationHandle h = 0;
  bool held = false;
  retained() = default;
  retained(const retained&) = delete;
  retained& operator=(const retained&) = delete;
  ~retained() {
    if (held) (void)driver().mem_release(h);
  }
  // Retains what is mapped at `a`; false (nothing held) when nothing is.
  bool at(std::uintptr_t a) {
    held = driver().mem_retain_allocation_handle(&h, reinterpret_cast<void*>(a)) == CUDA_SUCCESS;
    return held;
  }
};

ipc_handle export_vmm(const vmm_upstream& up, const void* p, std::size_t bytes) {
  if (!up.shareable())
    refuse(fmt::format("this pool's physical memory cannot be exported: {}", up.unshareable_reason()));
  const driver_api& d = driver();
  const std::size_t g = up.granularity();
  const auto begin = reinterpret_cast<std::uintptr_t>(p);
  const std::uintptr_t end = begin + bytes;
  const std::uintptr_t first = begin - begin % g;

  retained h0;
  if (!h0.at(first))
    refuse(fmt::format("nothing is mapped at {} (not a live block of this pool?)", p));
  const std::size_t s0 = up.handle_bytes(static_cast<std::uint64_t>(h0.h));
  if (s0 == 0)
    refuse(fmt::format("the memory at {} is not this pool's shareable memory (another pool's, or "
                       "created before export was possible)", p));
  // The run of granules of h0 before `first` is made of whole mappings of h0 laid end to end (the
  // pool may map a handle twice, side by side): its start plus whole handles gives the mapping.
  std::uintptr_t run = first;
  while (run >= g) {
    retained r;
    if (!r.at(run - g) || r.h != h0.h) break;
    run -= g;
  }
  const std::uintptr_t mapping = run + (first - run) / s0 * s0;

  ipc_handle out = handle_of(ipc_kind::vmm, up.device(), bytes, begin - mapping);
  for (std::uintptr_t a = mapping; a < end;) {
    retained r;
    if (!r.at(a))
      refuse(fmt::format("[{}, +{} B) is not mapped throughout: nothing at {:#x} (a size larger "
                         "than the block's?)", p, bytes, a));
    const std::size_t s = up.handle_bytes(static_cast<std::uint64_t>(r.h));
    if (s == 0) refuse(fmt::format("the memory at {:#x} is not this pool's shareable memory", a));
    int fd = -1;
    const CUresult rc = d.mem_export_to_shareable_handle(&fd, r.h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
    if (rc != CUDA_SUCCESS)
      throw cuda_error("cuMemExportToShareableHandle", static_cast<int>(rc), driver_error_name(rc),
                       fmt::format("gpumem ipc: export_block: cuMemExportToShareableHandle of the "
                                   "piece at {:#x} failed: {}", a, driver_error_name(rc)));
    out.fds.emplace_back(fd);
    out.piece_bytes.push_back(s);
    out.piece_ids.push_back(static_cast<std::uint64_t>(r.h));
    a += s;
  }
  validate(out, "export_block");
  return out;
}

ipc_handle export_segment(const device_upstream& up, const void* p, std::size_t bytes) {
  device_guard guard(up.device());
  CUdeviceptr base = 0;
  std::size_t size = 0;
  const CUresult rc = driver().mem_get_address_range(&base, &size, reinterpret_cast<CUdeviceptr>(p));
  if (rc != CUDA_SUCCESS)
    refuse(fmt::format("{} is not in a cudaMalloc segment ({}; not a live block of this pool?)", p,
                       driver_error_name(rc)));
  const auto begin = reinterpret_cast<std::uintptr_t>(p);
  if (begin + bytes > base + size)
    refuse(fmt::format("[{}, +{} B) runs past its segment [{:#x}, +{} B) (a size larger than the "
                       "block's?)", p, bytes, static_cast<std::uintptr_t>(base), size));
  cudaIpcMemHandle_t h{};
  static_assert(sizeof(h) == sizeof(ipc_handle::runtime));
  GPUMEM_CUDA_CHECK(cudaIpcGetMemHandle(&h, reinterpret_cast<void*>(base)));
  ipc_handle out = handle_of(ipc_kind::runtime, up.device(), bytes, begin - base);
  out.runtime_bytes = size;
  out.segment_address = base;
  std::memcpy(out.runtime.data(), &h, sizeof(h));
  validate(out, "export_block");
  return out;
}

}  // namespace

ipc_handle export_block(const gpu_pool& pool, const void* p, std::size_t bytes) {
  if (p == nullptr || bytes == 0)
    refuse(fmt::format("block {} of {} B (export needs a live block of at least 1 byte)", p, bytes));
  upstream& up = pool.memory();
  if (const auto* v = dynamic_cast<const vmm_upstream*>(&up)) return export_vmm(*v, p, bytes);
  if (const auto* s = dynamic_cast<const device_upstream*>(&up)) return export_segment(*s, p, bytes);
  refuse(fmt::format("the pool's upstream '{}' cannot export (cudaIpcGetMemHandle does not take "
                     "cudaMemPool memory); use the vmm or device upstream", up.name()));
}

ipc_handle gpu_pool::export_block(const void* p, std::size_t bytes) const {
  return gpumem::export_block(*this, p, bytes);
}

}  // namespace gpumem
