#pragma once
// gpu_pool: gpumem::pool on a real GPU, ready to use. Owns the upstream (the virtual-memory arena
// by default), the event-based ordering and the pool. A value type: copies share one pool and
// compare equal, as CCCL's resource concept expects.
#include <memory>

#include "gpumem/cuda/async_pool.hpp"
#include "gpumem/cuda/cccl_compat.hpp"
#include "gpumem/pool.hpp"
#include "gpumem/resource.hpp"

namespace gpumem {

enum class gpu_upstream_kind { vmm, device, async };

struct gpu_pool_options {
  gpu_upstream_kind upstream = gpu_upstream_kind::vmm;
  int device = -1;
  pool_options pool;
  async_pool_options async;   // upstream == async only
  // upstream == vmm: physical memory is created exportable as POSIX file descriptors, so
  // export_block can share it with another process. false: plain handles, export refused.
  bool shareable = true;
};

struct ipc_handle;
class imported_block;

class gpu_pool {
 public:
  explicit gpu_pool(gpu_pool_options opts = {});
  // Internal (tests, replay's comparisons): the policy's settings too (gpumem/detail/pool_tuning.hpp,
  // not installed).
  gpu_pool(gpu_pool_options opts, const detail::pool_tuning& tuning);
  // Copies share the pool. No move operations: a move copies, so an object moved from still holds
  // the pool (pool_ could not dangle, nor state_ be null under it).
  gpu_pool(const gpu_pool&) = default;
  gpu_pool& operator=(const gpu_pool&) = default;
  // Same contract as gpumem::pool::allocate / deallocate. Inline, through pool_: a call made here
  // goes straight to the pool's common path, without a call of its own or the two loads through
  // state_ that came before the pool's own work.
  void* allocate(std::size_t bytes, std::size_t alignment = default_alignment, stream_ref s = {}) {
    return pool_->allocate(bytes, alignment, s);
  }
  void deallocate(void* p, std::size_t bytes, std::size_t alignment = default_alignment,
                  stream_ref s = {}) noexcept {
    pool_->deallocate(p, bytes, alignment, s);
  }
  void* allocate(std::size_t bytes, stream_ref s) { return pool_->allocate(bytes, default_alignment, s); }
  void deallocate(void* p, std::size_t bytes, stream_ref s) noexcept {
    pool_->deallocate(p, bytes, default_alignment, s);
  }

  // CUDA graph capture (gpumem/graph_pool.hpp), as PyTorch's graph_pool_handle() and
  // torch.cuda.graph(pool=...): make a graph pool, call begin_capture(s, g) before
  // cudaStreamBeginCapture(s) and end_capture(s) after cudaStreamEndCapture(s); every allocation
  // and free on `s` in between goes to `g`, whose memory stays with the graph until
  // release_graph_pool (pass the stream the graph was replayed on). A stream that captures with no
  // scope begun is not routed: the pool throws std::logic_error when it would record an event on
  // it (never into the capture), but an allocation its front cache serves goes unnoticed — begin a
  // scope for every capture that allocates through the pool.
  graph_pool_id create_graph_pool() { return pool_->create_graph_pool(); }
  void begin_capture(stream_ref s, graph_pool_id g) { pool_->begin_capture(s, g); }
  void end_capture(stream_ref s) { pool_->end_capture(s); }
  void release_graph_pool(graph_pool_id g, stream_ref s = {}) { pool_->release_graph_pool(g, s); }
  graph_pool_stats graph_stats(graph_pool_id g) const { return pool_->graph_stats(g); }

  gpumem::pool& pool() const noexcept { return *pool_; }
  upstream& memory() const noexcept;
  pool_stats stats() const { return pool().stats(); }
  void trim() { pool().trim(); }
  void settle() { pool().settle(); }
  bool operator==(const gpu_pool& o) const noexcept { return state_ == o.state_; }

  // Memory between processes (cuda/ipc.hpp has the rules): the live block [p, p + bytes) of this
  // pool as a handle for send_handle, and a handle received from another process mapped here.
  ipc_handle export_block(const void* p, std::size_t bytes) const;
  static imported_block import_block(const ipc_handle& h, int device = -1);

  GPUMEM_CCCL_MEMBERS(gpu_pool)
  GPUMEM_CCCL_DEVICE_ACCESSIBLE(gpu_pool)

  struct state;

 private:
  std::shared_ptr<state> state_;
  gpumem::pool* pool_;  // state_'s pool, which lives as long as state_ (copies share both)
};

static_assert(resource<gpu_pool>);
static_assert(cccl::async_resource_with<gpu_pool, cccl::device_accessible>);

}  // namespace gpumem
