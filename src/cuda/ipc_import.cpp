// import_block: another process's block mapped here, and its release (cuda/ipc.hpp).
#include <unistd.h>

#include <fmt/format.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <utility>

#include "cuda_check.hpp"
#include "device_util.hpp"
#include "driver_api.hpp"
#include "gpumem/cuda/ipc.hpp"

namespace gpumem {

using namespace cuda_detail;

namespace {

std::atomic<std::size_t> live_handles{0}, live_ranges{0}, live_segments{0};

// Segments opened with cudaIpcOpenMemHandle, by (exporter pid, segment address): CUDA opens a
// segment once per process, so every block of one segment shares one opening, closed with its last.
struct open_segment {
  void* base;
  std::size_t blocks;
};
std::mutex segments_mutex;
std::map<std::pair<std::uint64_t, std::uint64_t>, open_segment>& segments() {
  static auto* m = new std::map<std::pair<std::uint64_t, std::uint64_t>, open_segment>;  // outlives exit-time releases
  return *m;
}

[[noreturn]] void import_failed(const char* call, CUresult rc, const std::string& what) {
  throw cuda_error(call, static_cast<int>(rc), driver_error_name(rc),
                   fmt::format("gpumem ipc: import_block: {}: {} failed: {}", what, call, driver_error_name(rc)));
}

void import_vmm(imported_block& b, const ipc_handle& h, int device, void*& base, std::size_t& reserved,
                std::size_t& mapped, std::vector<std::uint64_t>& handles) {
  const driver_api& d = driver();
  std::size_t total = 0;
  for (const std::uint64_t s : h.piece_bytes) total += s;
  handles.reserve(h.fds.size());
  for (std::size_t i = 0; i < h.fds.size(); ++i) {
    CUmemGenericAllocationHandle ih = 0;
    const CUresult rc = d.mem_import_from_shareable_handle(
        &ih, reinterpret_cast<void*>(static_cast<std::intptr_t>(h.fds[i].get())),
        CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    if (rc != CUDA_SUCCESS) {
      b.release();
      import_failed("cuMemImportFromShareableHandle", rc,
                    fmt::format("descriptor {} of piece {} of {} is not an exported CUDA allocation",
                                h.fds[i].get(), i, h.fds.size()));
    }
    handles.push_back(static_cast<std::uint64_t>(ih));
    ++live_handles;
  }
  CUdeviceptr va = 0;
  if (const CUresult rc = d.mem_address_reserve(&va, total, 0, 0, 0); rc != CUDA_SUCCESS) {
    b.release();
    import_failed("cuMemAddressReserve", rc, fmt::format("reserving {} B of addresses", total));
  }
  base = reinterpret_cast<void*>(va);
  reserved = total;
  ++live_ranges;
  for (std::size_t i = 0; i < handles.size(); ++i) {
    const CUresult rc = d.mem_map(va + mapped, h.piece_bytes[i], 0,
                                  static_cast<CUmemGenericAllocationHandle>(handles[i]), 0);
    if (rc != CUDA_SUCCESS) {
      b.release();
      import_failed("cuMemMap", rc, fmt::format("mapping piece {} of {} ({} B)", i, handles.size(), h.piece_bytes[i]));
    }
    mapped += h.piece_bytes[i];
  }
  CUmemAccessDesc access{};
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = device;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  if (const CUresult rc = d.mem_set_access(va, total, &access, 1); rc != CUDA_SUCCESS) {
    b.release();
    import_failed("cuMemSetAccess", rc, fmt::format("giving device {} access (is the exporter's memory on "
                                                    "another GPU?)", device));
  }
}

}  // namespace

imported_block import_block(const ipc_handle& h, int device) {
  validate(h, "import_block");
  const int dev = resolve_device(device);
  device_guard guard(dev);
  imported_block b;
  b.kind_ = h.kind;
  b.bytes_ = h.bytes;
  if (h.kind == ipc_kind::vmm) {
    import_vmm(b, h, dev, b.base_, b.reserved_, b.mapped_, b.handles_);
  } else {
    if (h.exporter_pid == static_cast<std::uint32_t>(::getpid()))
      throw std::invalid_argument("gpumem ipc: import_block: the handle was exported by this very "
                                  "process (CUDA opens a cudaIpcMemHandle_t only in another process)");
    const std::pair<std::uint64_t, std::uint64_t> key{h.exporter_pid, h.segment_address};
    std::lock_guard lock(segments_mutex);
    auto it = segments().find(key);
    if (it == segments().end()) {
      cudaIpcMemHandle_t rh{};
      std::memcpy(&rh, h.runtime.data(), sizeof(rh));
      void* base = nullptr;
      const cudaError_t rc = cudaIpcOpenMemHandle(&base, rh, cudaIpcMemLazyEnablePeerAccess);
      if (rc != cudaSuccess) {
        (void)cudaGetLastError();
        throw cuda_error("cudaIpcOpenMemHandle", static_cast<int>(rc), cudaGetErrorName(rc),
                         fmt::format("gpumem ipc: import_block: cudaIpcOpenMemHandle of process {}'s "
                                     "segment {:#x} failed: {} (exporter gone, or its segment freed?)",
                                     h.exporter_pid, h.segment_address, cudaGetErrorName(rc)));
      }
      it = segments().emplace(key, open_segment{base, 0}).first;
      ++live_segments;
    }
    ++it->second.blocks;
    b.base_ = it->second.base;
    b.segment_key_[0] = key.first;
    b.segment_key_[1] = key.second;
  }
  b.ptr_ = static_cast<char*>(b.base_) + h.offset;
  return b;
}

void imported_block::release() noexcept {
  if (kind_ == ipc_kind::vmm) {
    const driver_api* d = driver_if_available();
    const CUdeviceptr va = reinterpret_cast<CUdeviceptr>(base_);
    if (d && mapped_ && d->mem_unmap(va, mapped_) != CUDA_SUCCESS)
      std::fprintf(stderr, "gpumem ipc: imported_block: cuMemUnmap(%p, %zu) failed\n", base_, mapped_);
    if (d && reserved_) {
      if (d->mem_address_free(va, reserved_) != CUDA_SUCCESS)
        std::fprintf(stderr, "gpumem ipc: imported_block: cuMemAddressFree(%p) failed\n", base_);
      --live_ranges;
    }
    for (const std::uint64_t ih : handles_) {
      if (d && d->mem_release(static_cast<CUmemGenericAllocationHandle>(ih)) != CUDA_SUCCESS)
        std::fprintf(stderr, "gpumem ipc: imported_block: cuMemRelease of an imported handle failed\n");
      --live_handles;
    }
  } else if (kind_ == ipc_kind::runtime) {
    std::lock_guard lock(segments_mutex);
    auto it = segments().find({segment_key_[0], segment_key_[1]});
    if (it != segments().end() && --it->second.blocks == 0) {
      const cudaError_t rc = cudaIpcCloseMemHandle(it->second.base);
      if (rc != cudaSuccess)
        std::fprintf(stderr, "gpumem ipc: imported_block: cudaIpcCloseMemHandle(%p) failed: %s\n",
                     it->second.base, cudaGetErrorName(rc));
      segments().erase(it);
      --live_segments;
    }
  }
  kind_ = ipc_kind::none;
  ptr_ = base_ = nullptr;
  bytes_ = reserved_ = mapped_ = 0;
  handles_.clear();
}

imported_block::~imported_block() { release(); }

imported_block::imported_block(imported_block&& o) noexcept
    : kind_(std::exchange(o.kind_, ipc_kind::none)), ptr_(std::exchange(o.ptr_, nullptr)),
      bytes_(std::exchange(o.bytes_, 0)), base_(std::exchange(o.base_, nullptr)),
      reserved_(std::exchange(o.reserved_, 0)), mapped_(std::exchange(o.mapped_, 0)),
      handles_(std::move(o.handles_)) {
  o.handles_.clear();
  segment_key_[0] = o.segment_key_[0];
  segment_key_[1] = o.segment_key_[1];
}

imported_block& imported_block::operator=(imported_block&& o) noexcept {
  if (this != &o) {
    release();
    kind_ = std::exchange(o.kind_, ipc_kind::none);
    ptr_ = std::exchange(o.ptr_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
    base_ = std::exchange(o.base_, nullptr);
    reserved_ = std::exchange(o.reserved_, 0);
    mapped_ = std::exchange(o.mapped_, 0);
    handles_ = std::move(o.handles_);
    o.handles_.clear();
    segment_key_[0] = o.segment_key_[0];
    segment_key_[1] = o.segment_key_[1];
  }
  return *this;
}

imported_block gpu_pool::import_block(const ipc_handle& h, int device) {
  return gpumem::import_block(h, device);
}

ipc_import_counts ipc_imports_outstanding() noexcept {
  return {live_handles.load(), live_ranges.load(), live_segments.load()};
}

}  // namespace gpumem
