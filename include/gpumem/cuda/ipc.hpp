#pragma once
// Blocks of a gpu_pool shared with another process on the same host.
//
//   exporter                                   importer
//   ipc_handle h = pool.export_block(p, n);
//   send_handle(sock, h);            ───────▶  ipc_handle h = receive_handle(sock);
//                                              imported_block b = gpu_pool::import_block(h);
//                                              ... use b.get() on the GPU ...
//                                              b.release();   // after its work is done
//                                    ◀───────  "released" (the caller's own message)
//   pool.deallocate(p, n, s);
//
// Virtual-memory pools (the default upstream) export the block's physical pieces as POSIX file
// descriptors (cuMemExportToShareableHandle); the importer imports them
// (cuMemImportFromShareableHandle), reserves an address range, maps them there end to end and
// makes them readable and writable by its device. Pools on plain cudaMalloc segments export the
// segment's cudaIpcMemHandle_t and the block's offset; the importer opens it once per segment
// (cudaIpcOpenMemHandle) however many of its blocks it holds. Pools on a cudaMemPool (the async
// upstream) cannot export: cudaIpcGetMemHandle does not take its memory.
//
// Lifetime — the exporter keeps the block live until the importer has released it:
//  - export_block takes nothing from the pool: the block stays the caller's, and the caller must
//    not deallocate it until every process it was sent to has called release() (or destroyed its
//    imported_block) and said so, e.g. with a message back over the same socket. Only then may the
//    block go back to the pool, so the pool never hands memory an importer still maps to anyone
//    else. The pool itself never checks this: it adds nothing to allocate or deallocate.
//  - On the VMM upstream the importer's mapping holds the physical memory itself, so a block freed
//    too early is not unmapped under the importer, but it may be reused and then shared: a data
//    race, not a fault. On plain segments a segment freed too early is freed under the importer.
//  - A handle owns its descriptors and closes them when destroyed; after import_block the
//    importer's mapping no longer needs them, so destroy its handle then. A piece (or segment)
//    several imported blocks lie on is imported (or opened) once and shared; an imported_block
//    unmaps and frees its own address range on release() or destruction, and the last block on a
//    piece releases it (cuMemRelease), the last on a segment closes it (cudaIpcCloseMemHandle).
//  - The importer reaches the whole of each piece (or segment) under the block, not only the
//    block, as with cudaIpcGetMemHandle: share blocks only with processes trusted with the pool.
//  - The importing process must not be the exporting one (CUDA refuses to open its own handles).
#include <cstddef>
#include <cstdint>
#include <vector>

#include "gpumem/cuda/gpu_pool.hpp"
#include "gpumem/ipc_handle.hpp"

namespace gpumem {

// A block of another process's pool, mapped in this one.
class imported_block {
 public:
  imported_block() = default;
  ~imported_block();
  imported_block(imported_block&& o) noexcept;
  imported_block& operator=(imported_block&& o) noexcept;
  imported_block(const imported_block&) = delete;
  imported_block& operator=(const imported_block&) = delete;

  void* get() const noexcept { return ptr_; }
  std::size_t size() const noexcept { return bytes_; }
  explicit operator bool() const noexcept { return ptr_ != nullptr; }
  // Unmaps and releases everything import took; idempotent. Work on the block must be finished
  // (synchronise the streams that used it first). Failures are reported on stderr, not thrown.
  void release() noexcept;

 private:
  friend imported_block import_block(const ipc_handle& h, int device);
  friend struct imported_access;
  ipc_kind kind_ = ipc_kind::none;
  void* ptr_ = nullptr;          // the block
  std::size_t bytes_ = 0;
  void* base_ = nullptr;         // vmm: the reserved range; runtime: the opened segment
  std::size_t reserved_ = 0;     // vmm: the range's size
  std::size_t mapped_ = 0;       // vmm: bytes of it mapped (from base_)
  std::uint64_t exporter_ = 0;   // the exporter's pid
  std::vector<std::uint64_t> pieces_;  // vmm: the exporter's ids of the pieces imported for it
  std::uint64_t segment_ = 0;    // runtime: the segment's address in the exporter
};

// The same as gpu_pool::export_block / import_block.
ipc_handle export_block(const gpu_pool& pool, const void* p, std::size_t bytes);
// Maps `h` on `device` (-1: the current device; it must be the GPU the exporter's memory is on).
// Throws std::invalid_argument for a malformed handle, cuda_error naming the call that failed
// (e.g. a descriptor that is not a CUDA allocation's, or a handle of this very process).
imported_block import_block(const ipc_handle& h, int device = -1);

// What this process holds of imports, for leak checks: imported physical handles not yet released,
// address ranges still reserved for imports, segments still open with cudaIpcOpenMemHandle.
struct ipc_import_counts {
  std::size_t handles = 0;
  std::size_t ranges = 0;
  std::size_t segments = 0;
};
ipc_import_counts ipc_imports_outstanding() noexcept;

}  // namespace gpumem
