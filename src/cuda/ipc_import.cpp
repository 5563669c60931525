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

// What this process has imported, by (exporter pid, the exporter's name for it): a piece's handle
// (cuMemImportFromShareableHandle) or a segment's opening (cudaIpcOpenMemHandle), each taken once
// however many blocks lie on it and given back with the last. CUDA opens a segment only once per
// process, and importing a piece once per block would cost a driver call per block.
using import_key = std::pair<std::uint64_t, std::uint64_t>;
struct shared_import {
  std::uint64_t value;   // the imported handle, or the segment's address here
  std::size_t blocks;
};
struct import_table {
  std::mutex m;
  std::map<import_key, shared_import> pieces, segments;
};
import_table& imports() {
  static auto* t = new import_table;  // outlives blocks released during exit
  return *t;
}

[[noreturn]] void import_failed(const char* call, CUresult rc, const std::string& what) {
  throw cuda_error(call, static_cast<int>(rc), driver_error_name(rc),
                   fmt::format("gpumem ipc: import_block: {}: {} failed: {}", what, call, driver_error_name(rc)));
}

// Caller holds imports().m. Drops one block's use of each piece, releasing those it was last on.
void drop_pieces(std::uint64_t exporter, const std::vector<std::uint64_t>& ids) noexcept {
  const driver_api* d = driver_if_available();
  auto& pieces = imports().pieces;
  for (const std::uint64_t id : ids) {
    const auto it = pieces.find({exporter, id});
    if (it == pieces.end() || --it->second.blocks != 0) continue;
    if (d && d->mem_release(static_cast<CUmemGenericAllocationHandle>(it->second.value)) != CUDA_SUCCESS)
      std::fprintf(stderr, "gpumem ipc: imported_block: cuMemRelease of an imported piece failed\n");
    pieces.erase(it);
    --live_handles;
  }
}

}  // namespace

struct imported_access {
  static void import_vmm(imported_block& b, const ipc_handle& h, int device) {
    const driver_api& d = driver();
    std::size_t total = 0;
    for (const std::uint64_t s : h.piece_bytes) total += s;
    std::vector<CUmemGenericAllocationHandle> handles(h.fds.size());
    {
      std::lock_guard lock(imports().m);
      auto& pieces = imports().pieces;
      b.pieces_.reserve(h.fds.size());
      for (std::size_t i = 0; i < h.fds.size(); ++i) {
        const import_key key{h.exporter_pid, h.piece_ids[i]};
        auto it = pieces.find(key);
        if (it == pieces.end()) {
          CUmemGenericAllocationHandle ih = 0;
          const CUresult rc = d.mem_import_from_shareable_handle(
              &ih, reinterpret_cast<void*>(static_cast<std::intptr_t>(h.fds[i].get())),
              CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
          if (rc != CUDA_SUCCESS) {
            drop_pieces(b.exporter_, b.pieces_);
            b.pieces_.clear();
            import_failed("cuMemImportFromShareableHandle", rc,
                          fmt::format("descriptor {} of piece {} of {} is not an exported CUDA allocation",
                                      h.fds[i].get(), i, h.fds.size()));
          }
          it = pieces.emplace(key, shared_import{static_cast<std::uint64_t>(ih), 0}).first;
          ++live_handles;
        }
        ++it->second.blocks;
        b.pieces_.push_back(h.piece_ids[i]);
        handles[i] = static_cast<CUmemGenericAllocationHandle>(it->second.value);
      }
    }
    CUdeviceptr va = 0;
    if (const CUresult rc = d.mem_address_reserve(&va, total, 0, 0, 0); rc != CUDA_SUCCESS) {
      b.release();
      import_failed("cuMemAddressReserve", rc, fmt::format("reserving {} B of addresses", total));
    }
    b.base_ = reinterpret_cast<void*>(va);
    b.reserved_ = total;
    ++live_ranges;
    for (std::size_t i = 0; i < handles.size(); ++i) {
      const CUresult rc = d.mem_map(va + b.mapped_, h.piece_bytes[i], 0, handles[i], 0);
      if (rc != CUDA_SUCCESS) {
        b.release();
        import_failed("cuMemMap", rc, fmt::format("mapping piece {} of {} ({} B)", i, handles.size(), h.piece_bytes[i]));
      }
      b.mapped_ += h.piece_bytes[i];
    }
    CUmemAccessDesc access{};
    access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    access.location.id = device;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    if (const CUresult rc = d.mem_set_access(va, total, &access, 1); rc != CUDA_SUCCESS) {
      b.release();
      import_failed("cuMemSetAccess", rc, fmt::format("giving device {} access (is the exporter's memory "
                                                      "on another GPU?)", device));
    }
  }

  static void open_segment(imported_block& b, const ipc_handle& h) {
    if (h.exporter_pid == static_cast<std::uint32_t>(::getpid()))
      throw std::invalid_argument("gpumem ipc: import_block: the handle was exported by this very "
                                  "process (CUDA opens a cudaIpcMemHandle_t only in another process)");
    const import_key key{h.exporter_pid, h.segment_address};
    std::lock_guard lock(imports().m);
    auto& segments = imports().segments;
    auto it = segments.find(key);
    if (it == segments.end()) {
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
      it = segments.emplace(key, shared_import{reinterpret_cast<std::uint64_t>(base), 0}).first;
      ++live_segments;
    }
    ++it->second.blocks;
    b.base_ = reinterpret_cast<void*>(it->second.value);
    b.segment_ = h.segment_address;
  }

  static void release(imported_block& b) noexcept {
    if (b.kind_ == ipc_kind::vmm) {
      const driver_api* d = driver_if_available();
      const CUdeviceptr va = reinterpret_cast<CUdeviceptr>(b.base_);
      if (d && b.mapped_ && d->mem_unmap(va, b.mapped_) != CUDA_SUCCESS)
        std::fprintf(stderr, "gpumem ipc: imported_block: cuMemUnmap(%p, %zu) failed\n", b.base_, b.mapped_);
      if (b.reserved_) {
        if (d && d->mem_address_free(va, b.reserved_) != CUDA_SUCCESS)
          std::fprintf(stderr, "gpumem ipc: imported_block: cuMemAddressFree(%p) failed\n", b.base_);
        --live_ranges;
      }
      std::lock_guard lock(imports().m);
      drop_pieces(b.exporter_, b.pieces_);
    } else if (b.kind_ == ipc_kind::runtime && b.base_) {
      std::lock_guard lock(imports().m);
      auto& segments = imports().segments;
      const auto it = segments.find({b.exporter_, b.segment_});
      if (it != segments.end() && --it->second.blocks == 0) {
        void* base = reinterpret_cast<void*>(it->second.value);
        const cudaError_t rc = cudaIpcCloseMemHandle(base);
        if (rc != cudaSuccess)
          std::fprintf(stderr, "gpumem ipc: imported_block: cudaIpcCloseMemHandle(%p) failed: %s\n", base,
                       cudaGetErrorName(rc));
        segments.erase(it);
        --live_segments;
      }
    }
  }
};

imported_block import_block(const ipc_handle& h, int device) {
  validate(h, "import_block");
  const int dev = resolve_device(device);
  device_guard guard(dev);
  imported_block b;
  b.kind_ = h.kind;
  b.bytes_ = h.bytes;
  b.exporter_ = h.exporter_pid;
  if (h.kind == ipc_kind::vmm)
    imported_access::import_vmm(b, h, dev);
  else
    imported_access::open_segment(b, h);
  b.ptr_ = static_cast<char*>(b.base_) + h.offset;
  return b;
}

void imported_block::release() noexcept {
  imported_access::release(*this);
  kind_ = ipc_kind::none;
  ptr_ = base_ = nullptr;
  bytes_ = reserved_ = mapped_ = 0;
  exporter_ = segment_ = 0;
  pieces_.clear();
}

imported_block::~imported_block() { release(); }

imported_block::imported_block(imported_block&& o) noexcept { *this = std::move(o); }

imported_block& imported_block::operator=(imported_block&& o) noexcept {
  if (this != &o) {
    release();
    kind_ = std::exchange(o.kind_, ipc_kind::none);
    ptr_ = std::exchange(o.ptr_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
    base_ = std::exchange(o.base_, nullptr);
    reserved_ = std::exchange(o.reserved_, 0);
    mapped_ = std::exchange(o.mapped_, 0);
    exporter_ = std::exchange(o.exporter_, 0);
    pieces_ = std::exchange(o.pieces_, {});
    segment_ = std::exchange(o.segment_, 0);
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
