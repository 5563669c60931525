// libgpumem_torch.so: gpumem's gpu_pool behind C entry points, for
//   torch.cuda.memory.CUDAPluggableAllocator(path, "gpumem_alloc", "gpumem_free")
// and for CuPy / ctypes (integrations/python/gpumem).
//
// One gpu_pool per device, created on first use with that device current. Options come from
// gpumem_configure() (before first use) on top of GPUMEM_CONFIG, read once: the same
// "key=value,..." text gpumem_configure() takes, parsed by gpumem::parse_pool_config. Every option
// left unset keeps the library's default. A bad GPUMEM_CONFIG, or a gpumem_configure() call that
// was refused and not followed by a good one, stops the pools from starting: the first allocation
// fails with the reason, also said once on stderr.
// The key trace=PATH (no comma in it; "{pid}" becomes the process id) records every request the
// entry points serve as a trace in RMM's log CSV — what `gpumem replay`, `doctor` and `report`
// read — so a job's own allocations can be replayed and diagnosed without a GPU.
// (The library itself takes options only as a struct; this shared library is a tool-side adaptor,
// so the environment is read here and nowhere else.)
//
// CUDA runtime: the gpumem library links cudart statically, so this .so carries its own copy of
// the runtime next to PyTorch's libcudart. Two runtimes in one process are legal: both sit on the
// same driver and the same primary context per device, so the cudaStream_t values PyTorch hands us
// and the events we record on them are valid in either runtime.
//
// Failure. PyTorch's CUDAPluggableAllocator::malloc stores whatever alloc_fn returns without
// checking it (torch/csrc/cuda/CUDAPluggableAllocator.cpp), so a nullptr would become a tensor with
// a null data pointer and a later illegal-address fault. gpumem_alloc therefore throws (a
// std::bad_alloc carrying gpumem's out-of-memory report): PyTorch catches it and raises a Python
// RuntimeError with that text (the error path PyTorch's own tests exercise for pluggable
// allocators, pytorch/pytorch#94166). gpumem_alloc_nothrow is the C contract for everyone else
// (CuPy, ctypes): nullptr on failure, nothing printed, the message in gpumem_last_error().
// Throwing out of this .so needs the process's shared unwinder (libgcc_s), so the .so links
// libstdc++ statically but libgcc dynamically (see integrations/CMakeLists.txt).
#include <cuda_runtime_api.h>
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "gpumem/cuda/gpu_pool.hpp"
#include "gpumem/cuda/upstreams.hpp"
#include "gpumem/errors.hpp"
#include "gpumem/per_device.hpp"
#include "gpumem/pool_option_table.hpp"
#include "gpumem/trace_adaptor.hpp"

namespace {

constexpr int max_devices = 64;

thread_local std::string last_error;

// What PyTorch receives when a request cannot be served: a std::bad_alloc (PyTorch's handlers
// catch std::exception) whose text is gpumem's report.
class alloc_failed : public std::bad_alloc {
 public:
  explicit alloc_failed(std::string m) : message_(std::move(m)) {}
  const char* what() const noexcept override { return message_.c_str(); }

 private:
  std::string message_;
};

int current_device();
std::unique_ptr<gpumem::gpu_pool> make_pool(int device);

struct registry {
  std::mutex mutex;
  gpumem::gpu_pool_options options;
  bool env_read = false;
  std::string env_error;        // GPUMEM_CONFIG was refused: no pool starts
  std::string configure_error;  // the last gpumem_configure() was refused: no pool starts until a good one
  bool used = false;   // a pool exists: options are frozen
  // Pools are created once and never destroyed: PyTorch and CuPy free tensors during interpreter
  // shutdown, after static destructors may have run, and the CUDA runtime may already be gone.
  // One per device index (gpumem::per_device): the device the entry points are given picks it.
  gpumem::per_device<gpumem::gpu_pool> pools{max_devices, make_pool, current_device};
  std::string trace_path;  // trace=PATH: where the first pool's creation opens the trace
  // The trace of every device's requests; created with the first pool, never destroyed (frees
  // arrive during shutdown), written out at exit.
  std::atomic<gpumem::detail::trace_sink*> trace{nullptr};
};

registry& reg() {
  static registry* r = new registry;   // leaked on purpose, see above
  return *r;
}

std::string lower(std::string_view s) {
  std::string out;
  for (char c : s) out.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
  return out;
}

// Applies a GPUMEM_CONFIG text to `o` and `trace_path`, all or nothing. Throws
// std::invalid_argument naming the first bad key or value, its text starting with `source`.
void apply_config(std::string_view text, gpumem::gpu_pool_options& o, std::string& trace_path,
                  std::string_view source) {
  gpumem::gpu_pool_options next = o;
  std::string next_trace = trace_path;
  const gpumem::pool_config_key extra[] = {
      {"upstream", "vmm, device or async",
       [&](std::string_view v) {
         const std::string l = lower(v);
         if (l == "vmm") next.upstream = gpumem::gpu_upstream_kind::vmm;
         else if (l == "device") next.upstream = gpumem::gpu_upstream_kind::device;
         else if (l == "async") next.upstream = gpumem::gpu_upstream_kind::async;
         else return false;
         return true;
       }},
      {"trace", "a file path",
       [&](std::string_view v) {
         next_trace = std::string(v);
         return !v.empty();
       }},
  };
  gpumem::parse_pool_config(text, next.pool, extra, source);
  o = next;
  trace_path = next_trace;
}

// Caller holds reg().mutex. GPUMEM_CONFIG, once; a bad one is kept as env_error. The variables it
// replaced are refused rather than ignored, so a job that still sets them learns where they went.
void read_env_once(registry& r) {
  if (r.env_read) return;
  r.env_read = true;
  for (auto [variable, key] : {std::pair{"GPUMEM_RELEASE_THRESHOLD", "release_threshold_bytes"},
                                std::pair{"GPUMEM_MAX_RESERVED", "max_reserved_bytes"}}) {
    if (std::getenv(variable) != nullptr) {
      r.env_error = std::string(variable) + " is not read: set GPUMEM_CONFIG=" + key + "=VALUE instead";
      return;
    }
  }
  if (const char* v = std::getenv("GPUMEM_CONFIG")) {
    try {
      apply_config(v, r.options, r.trace_path, "GPUMEM_CONFIG");
    } catch (const std::invalid_argument& e) {
      r.env_error = e.what();
    }
  }
}

// Caller holds r.mutex: throws when the configuration was refused, saying why on stderr the first
// time (PyTorch's own message for a failed allocation may not carry ours).
void check_configuration(registry& r) {
  const std::string& why = !r.env_error.empty() ? r.env_error : r.configure_error;
  if (why.empty()) return;
  static bool said = false;
  if (!said) {
    said = true;
    std::fprintf(stderr, "gpumem: the pool does not start: %s\n", why.c_str());
  }
  throw std::invalid_argument("gpumem: the pool does not start: " + why);
}

// Makes `device` current for the scope when it is not already (PyTorch usually calls with its
// current device, so the common path is one cudaGetDevice).
class scoped_device {
 public:
  explicit scoped_device(int device) {
    if (device < 0) return;
    int cur = -1;
    if (cudaGetDevice(&cur) == cudaSuccess && cur != device) {
      if (cudaSetDevice(device) == cudaSuccess) previous_ = cur;
    }
  }
  ~scoped_device() {
    if (previous_ >= 0) (void)cudaSetDevice(previous_);
  }
  scoped_device(const scoped_device&) = delete;
  scoped_device& operator=(const scoped_device&) = delete;

 private:
  int previous_ = -1;
};

int current_device() {
  int d = 0;
  if (cudaGetDevice(&d) != cudaSuccess) d = 0;
  return d;
}

// Caller holds r.mutex: opens the trace file (throws naming it when it cannot) and writes it out
// at exit.
void open_trace(registry& r) {
  std::string path = r.trace_path;
  if (const auto at = path.find("{pid}"); at != std::string::npos) path.replace(at, 5, std::to_string(getpid()));
  auto* sink = new gpumem::detail::trace_sink(std::filesystem::path(path), {});  // never deleted, see registry
  r.trace.store(sink, std::memory_order_release);
  std::atexit([] {
    if (auto* t = reg().trace.load(std::memory_order_acquire)) t->flush();
  });
}

void record(gpumem::trace_action a, const void* p, std::size_t bytes, cudaStream_t s) noexcept {
  if (auto* t = reg().trace.load(std::memory_order_acquire)) [[unlikely]]
    t->record(a, p, bytes, gpumem::from_cuda_stream(s));
}

// The pool of `device`, created on first call. Throws what gpu_pool's constructor throws.
gpumem::gpu_pool& pool_for(int device) {
  if (device < 0) device = current_device();
  if (device >= max_devices) throw std::invalid_argument("gpumem: device index out of range");
  return reg().pools.get(device);
}

// pools' factory, called once per device under the map's lock.
std::unique_ptr<gpumem::gpu_pool> make_pool(int device) {
  registry& r = reg();
  std::lock_guard lock(r.mutex);
  read_env_once(r);
  check_configuration(r);
  if (!r.trace_path.empty() && !r.trace.load(std::memory_order_relaxed)) open_trace(r);
  gpumem::gpu_pool_options o = r.options;
  o.device = device;
  scoped_device guard(device);
  auto p = std::make_unique<gpumem::gpu_pool>(o);   // never deleted, see registry
  r.used = true;
  return p;
}

// The pool of `device` if it exists; nullptr otherwise (stats of an unused device are zeros).
gpumem::gpu_pool* existing_pool(int device) {
  if (device < 0) device = current_device();
  return reg().pools.find(device);
}

// `act` on `device`'s pool (-1: the current one) with that device current, if the pool exists:
// trim's and settle's entry points. Returns 0, or -1 with last_error set.
template <class Act>
int on_existing_pool(int device, Act act) noexcept {
  try {
    gpumem::gpu_pool* p = existing_pool(device);
    if (p == nullptr) return 0;
    scoped_device guard(device);
    act(*p);
    return 0;
  } catch (const std::exception& e) {
    last_error = e.what();
    return -1;
  }
}

// Which pool owns `p`: the one whose device the pointer lives on.
gpumem::gpu_pool* pool_of_pointer(const void* p) {
  cudaPointerAttributes attr{};
  if (cudaPointerGetAttributes(&attr, p) == cudaSuccess && attr.type == cudaMemoryTypeDevice)
    return existing_pool(attr.device);
  (void)cudaGetLastError();
  return existing_pool(-1);
}

gpumem::stream_ref to_ref(cudaStream_t s) { return gpumem::from_cuda_stream(s); }

// CUDA graph capture through PyTorch's pool hooks (set_begin_allocate_to_pool & co, wired by
// gpumem.torch.use()): torch.cuda.graph(pool=...) names a mempool id and a filter that tells which
// streams take part in the capture. Each (device, mempool id) gets one gpumem graph pool, kept
// while a capture or graph uses it (PyTorch calls begin once per capture and release once per
// graph). A stream joins the capture's graph pool at its first request the filter claims, and
// leaves it when PyTorch ends the capture.
using mempool_id = std::pair<unsigned long long, unsigned long long>;
struct torch_capture {
  int device;
  mempool_id id;
  std::function<bool(cudaStream_t)> filter;
  std::vector<cudaStream_t> streams;  // begun in the pool
};
struct torch_graph_pool {
  gpumem::graph_pool_id g = 0;
  int uses = 0;
};
struct capture_registry {
  std::mutex mutex;
  std::vector<torch_capture> active;
  std::map<std::pair<int, mempool_id>, torch_graph_pool> pools;
  std::atomic<std::size_t> active_count{0};
};
capture_registry& captures() {
  static auto* c = new capture_registry;  // never destroyed, as the pools (see registry)
  return *c;
}

// Before a request on `stream` while a capture is underway: the stream joins the graph pool of the
// capture whose filter claims it.
void join_capture(int device, cudaStream_t stream) {
  if (device < 0) device = current_device();
  capture_registry& c = captures();
  std::lock_guard lock(c.mutex);
  for (torch_capture& cap : c.active) {
    if (cap.device != device) continue;
    if (std::find(cap.streams.begin(), cap.streams.end(), stream) != cap.streams.end()) return;
    if (cap.filter && cap.filter(stream)) {
      pool_for(device).begin_capture(to_ref(stream), c.pools.at({device, cap.id}).g);
      cap.streams.push_back(stream);
      if (auto* t = reg().trace.load(std::memory_order_acquire)) t->record_capture(true, to_ref(stream));
      return;
    }
  }
}

void* allocate(ssize_t size, int device, cudaStream_t stream) {
  if (size <= 0) return nullptr;
  scoped_device guard(device);
  if (captures().active_count.load(std::memory_order_relaxed)) [[unlikely]]
    join_capture(device, stream);
  gpumem::gpu_pool& pool = pool_for(device);
  void* p = nullptr;
  try {
    p = pool.allocate(static_cast<std::size_t>(size), gpumem::default_alignment, to_ref(stream));
  } catch (const gpumem::out_of_memory&) {
    record(gpumem::trace_action::allocate_failure, nullptr, static_cast<std::size_t>(size), stream);
    throw;
  }
  record(gpumem::trace_action::allocate, p, static_cast<std::size_t>(size), stream);
  return p;
}

}  // namespace

extern "C" {

// PyTorch's alloc_fn. Throws on failure (see the top of this file); size <= 0 gives nullptr.
__attribute__((visibility("default"))) void* gpumem_alloc(ssize_t size, int device,
                                                          cudaStream_t stream) {
  try {
    return allocate(size, device, stream);
  } catch (const std::exception& e) {
    last_error = e.what();
  } catch (...) {
    last_error = "gpumem: unknown error";
  }
  // Thrown outside the handler so the message is copied once and the C++ runtime state is simple.
  throw alloc_failed("gpumem: " + last_error);
}

// C contract: nullptr on failure (message in gpumem_last_error()), nothing printed.
__attribute__((visibility("default"))) void* gpumem_alloc_nothrow(ssize_t size, int device,
                                                                  cudaStream_t stream) noexcept {
  try {
    return allocate(size, device, stream);
  } catch (const std::exception& e) {
    last_error = e.what();
  } catch (...) {
    last_error = "gpumem: unknown error";
  }
  return nullptr;
}

// PyTorch's free_fn (and CuPy's). nullptr / size <= 0: no-op. `stream` is the stream after whose
// current work the memory is unused (PyTorch passes the allocation stream; record_stream adds more).
__attribute__((visibility("default"))) void gpumem_free(void* ptr, ssize_t size, int device,
                                                        cudaStream_t stream) noexcept {
  if (ptr == nullptr || size <= 0) return;
  gpumem::gpu_pool* p = existing_pool(device);
  if (p == nullptr) p = pool_of_pointer(ptr);
  if (p == nullptr) {
    last_error = "gpumem_free: no gpumem pool on this device owns the pointer";
    return;
  }
  scoped_device guard(device);
  if (captures().active_count.load(std::memory_order_relaxed)) [[unlikely]] {
    try {
      join_capture(device, stream);
    } catch (const std::exception& e) {
      last_error = e.what();
    }
  }
  record(gpumem::trace_action::free, ptr, static_cast<std::size_t>(size), stream);  // before reuse
  p->deallocate(ptr, static_cast<std::size_t>(size), gpumem::default_alignment, to_ref(stream));
}

// Options for the pools not yet created: "key=value,..." or a flat JSON object, on top of
// GPUMEM_CONFIG. Keys: every pool_options field of include/gpumem/pool_option_table.hpp (by name
// or alias), upstream (vmm|device|async) and trace (a file path: every request recorded, see the
// top of this file); options not given keep the library's defaults. Returns 0; -1 if a pool
// already exists (nothing changed); -2 if the text or GPUMEM_CONFIG is wrong (nothing changed, and
// no pool starts until a call that succeeds; GPUMEM_CONFIG's error stays). Details in
// gpumem_last_error(): the first bad key or value, by name.
__attribute__((visibility("default"))) int gpumem_configure(const char* config) noexcept {
  try {
    registry& r = reg();
    std::lock_guard lock(r.mutex);
    if (r.used) {
      last_error = "gpumem_configure: called after first use; options are fixed once a pool exists";
      return -1;
    }
    read_env_once(r);
    if (!r.env_error.empty()) {
      last_error = r.env_error;
      return -2;
    }
    try {
      apply_config(config == nullptr ? "" : config, r.options, r.trace_path, "gpumem_configure");
    } catch (const std::invalid_argument& e) {
      r.configure_error = last_error = e.what();
      return -2;
    }
    r.configure_error.clear();
    return 0;
  } catch (const std::exception& e) {
    last_error = e.what();
    return -2;
  }
}

// out[n] (n <= 22) = the six of gpumem_stats, then: upstream allocations, granules mapped,
// granules unmapped, map calls, unmap calls, events recorded, front-cache hits, failed allocations,
// remap ns, remaps deferred, granules moved in stream order, the granules the driver really
// mapped and unmapped (the pool's moves less what kept mappings saved), upstream releases, cached
// bytes (reserved less live and its rounding) and the largest free mapped block.
// Returns how many it wrote, or -1 on error. Zeros for a device with no pool yet.
__attribute__((visibility("default"))) int gpumem_stats_ex(int device, std::uint64_t* out, int n) noexcept {
  try {
    constexpr int fields = 22;
    if (out == nullptr || n < 0) return -1;
    n = n < fields ? n : fields;
    std::uint64_t all[fields] = {};
    if (gpumem::gpu_pool* p = existing_pool(device)) {
      const gpumem::pool_stats s = p->stats();
      const std::uint64_t v[fields] = {s.live_bytes,     s.peak_live_bytes, s.reserved_bytes, s.peak_reserved_bytes,
                                       s.allocations,    s.deallocations,   s.upstream_calls, s.maps,
                                       s.unmaps,         s.map_calls,       s.unmap_calls,    s.events_recorded,
                                       s.front_hits,     s.failed_allocations, s.remap_ns,     s.remaps_deferred,
                                       s.stream_ordered_moves, s.driver_maps, s.driver_unmaps, s.upstream_releases,
                                       s.cached_bytes,   s.largest_free_block_bytes};
      std::copy(v, v + fields, all);
    }
    std::copy(all, all + n, out);
    return n;
  } catch (const std::exception& e) {
    last_error = e.what();
    return -1;
  }
}

// out[6] = live, peak live, reserved, peak reserved, allocations, frees: the first six of
// gpumem_stats_ex. Zeros for a device with no pool yet. Returns 0, or -1 on error.
__attribute__((visibility("default"))) int gpumem_stats(int device, std::size_t out[6]) noexcept {
  std::fill(out, out + 6, std::size_t{0});
  std::uint64_t v[6];
  if (gpumem_stats_ex(device, v, 6) < 0) return -1;
  std::copy(v, v + 6, out);
  return 0;
}

// Hands back everything cached on `device` (-1: the current one). Returns 0, or -1 on error.
__attribute__((visibility("default"))) int gpumem_trim(int device) noexcept {
  return on_existing_pool(device, [](gpumem::gpu_pool& p) { p.trim(); });
}

// pool::settle on `device`'s pool (-1: the current one): what its caches keep goes back to its
// free memory, nothing to the driver. Returns 0, or -1 on error.
__attribute__((visibility("default"))) int gpumem_settle(int device) noexcept {
  return on_existing_pool(device, [](gpumem::gpu_pool& p) { p.settle(); });
}

// Writes out the rows of the trace (configure's trace=PATH) recorded so far; the rest is written
// at exit. Returns 0, or -1 when no trace is being recorded.
__attribute__((visibility("default"))) int gpumem_flush_trace() noexcept {
  auto* t = reg().trace.load(std::memory_order_acquire);
  if (t == nullptr) {
    last_error = "gpumem_flush_trace: no trace is being recorded (configure trace=PATH before first use)";
    return -1;
  }
  t->flush();
  return 0;
}

// Every device's pool: the shape of PyTorch's reset_fn (torch.cuda.empty_cache()).
__attribute__((visibility("default"))) void gpumem_trim_all() noexcept {
  for (int d = 0; d < max_devices; ++d) {
    if (existing_pool(d) != nullptr) (void)gpumem_trim(d);
  }
}

// PyTorch's Tensor.record_stream: `ptr` is also used on `s`; its memory is reused only after the
// work enqueued on `s` before the free. The shape of PyTorch's record_stream_fn.
__attribute__((visibility("default"))) void gpumem_record_stream(void* ptr, cudaStream_t s) noexcept {
  last_error.clear();   // so Python can tell this call's failure from an older one
  if (ptr == nullptr) return;
  try {
    gpumem::gpu_pool* p = pool_of_pointer(ptr);
    if (p == nullptr) {
      last_error = "gpumem_record_stream: no gpumem pool owns the pointer";
      return;
    }
    p->pool().record_use(ptr, to_ref(s));
  } catch (const std::exception& e) {
    // The prefix tells Python this call failed (gpumem.record_stream raises on it).
    last_error = std::string("gpumem_record_stream: ") + e.what();
  }
}

__attribute__((visibility("default"))) int gpumem_reset_peaks(int device) noexcept {
  try {
    if (gpumem::gpu_pool* p = existing_pool(device)) p->pool().reset_peaks();
    return 0;
  } catch (const std::exception& e) {
    last_error = e.what();
    return -1;
  }
}

// PyTorch's graph pool hooks (CUDAPluggableAllocator's set_begin_allocate_to_pool,
// set_end_allocate_to_pool_fn and set_release_pool take these addresses): the shapes of
// void(int, MempoolId_t, std::function<bool(cudaStream_t)>) and void(int, MempoolId_t), where
// MempoolId_t is std::pair<unsigned long long, unsigned long long>. They throw on failure, as
// gpumem_alloc does: PyTorch raises it as a Python RuntimeError.
__attribute__((visibility("default"))) void gpumem_torch_begin_allocate_to_pool(
    int device, mempool_id id, std::function<bool(cudaStream_t)> filter) {
  if (device < 0) device = current_device();
  scoped_device guard(device);
  gpumem::gpu_pool& pool = pool_for(device);
  capture_registry& c = captures();
  std::lock_guard lock(c.mutex);
  auto [it, fresh] = c.pools.try_emplace({device, id});
  if (fresh) it->second.g = pool.create_graph_pool();
  ++it->second.uses;
  c.active.push_back({device, id, std::move(filter), {}});
  c.active_count.store(c.active.size(), std::memory_order_relaxed);
}

__attribute__((visibility("default"))) void gpumem_torch_end_allocate_to_pool(int device, mempool_id id) {
  if (device < 0) device = current_device();
  scoped_device guard(device);
  capture_registry& c = captures();
  std::lock_guard lock(c.mutex);
  for (auto it = c.active.begin(); it != c.active.end(); ++it) {
    if (it->device != device || it->id != id) continue;
    for (cudaStream_t s : it->streams) {
      pool_for(device).end_capture(to_ref(s));
      if (auto* t = reg().trace.load(std::memory_order_acquire)) t->record_capture(false, to_ref(s));
    }
    c.active.erase(it);
    break;
  }
  c.active_count.store(c.active.size(), std::memory_order_relaxed);
}

__attribute__((visibility("default"))) void gpumem_torch_release_pool(int device, mempool_id id) {
  if (device < 0) device = current_device();
  capture_registry& c = captures();
  std::lock_guard lock(c.mutex);
  auto it = c.pools.find({device, id});
  if (it == c.pools.end() || --it->second.uses > 0) return;
  scoped_device guard(device);
  // The graph is gone but its last replays may still run, on any stream: wait for the device.
  if (const cudaError_t rc = cudaDeviceSynchronize(); rc != cudaSuccess)
    throw std::runtime_error(std::string("gpumem_torch_release_pool: cudaDeviceSynchronize: ") + cudaGetErrorString(rc));
  pool_for(device).release_graph_pool(it->second.g);
  c.pools.erase(it);
}

// The calling thread's last failure, "" if none. Valid until the thread's next gpumem call.
__attribute__((visibility("default"))) const char* gpumem_last_error() noexcept {
  return last_error.c_str();
}

}  // extern "C"
