// Memory between processes on one GPU: this binary starts itself again as a second process
// (fork + exec, the child runs IpcGpuChild.DISABLED_ImporterRole, a test the suite itself never
// runs) joined by a socketpair. 10,000 blocks go
// from the parent's pool to the child and 10,000 from the child's pool back, in windows the
// importer holds at once; each importer checks the exporter's pattern with a kernel, writes its
// own, releases, and says so; only then does the exporter check the answer and free the block.
// Both processes count mismatches, their open descriptors and what imports still hold, and the
// parent checks the device's free memory after the child is gone. Also: the time of an export and
// an import beside cudaIpcGetMemHandle / cudaIpcOpenMemHandle in the same run, what exportable
// handles cost cuMemCreate, the refusals, and per-device pools on device 0.
#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <csignal>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "gpu_test_support.hpp"
#include "gpumem/cuda/device_pools.hpp"
#include "gpumem/cuda/ipc.hpp"
#include "gpumem/cuda/upstreams.hpp"

namespace gpumem::test {
namespace {

constexpr const char* socket_env = "GPUMEM_IPC_TEST_SOCKET";
constexpr const char* upstream_env = "GPUMEM_IPC_TEST_UPSTREAM";
constexpr std::size_t window = 32;                 // blocks an importer holds at once
constexpr std::uint64_t answer_tag = 1u << 30;     // the importer's pattern: tag + this

std::size_t block_count() {
  const char* v = std::getenv("GPUMEM_IPC_BLOCKS");
  return v ? std::strtoull(v, nullptr, 10) : 10000;
}

int open_fds() {
  int n = 0;
  if (DIR* d = ::opendir("/proc/self/fd")) {
    while (::readdir(d)) ++n;
    ::closedir(d);
  }
  return n;
}

double now_ns() {
  return static_cast<double>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                 std::chrono::steady_clock::now().time_since_epoch()).count());
}

// Sizes from a slab's slot to blocks over several granules.
std::size_t block_bytes(std::size_t i) {
  static constexpr std::size_t sizes[] = {256, 4000, (64u << 10) + 100, 1u << 20, (3u << 20) + 512, 9u << 20};
  return sizes[i % std::size(sizes)];
}

// The messages besides handles: a word of kind and a word of value.
enum class msg : std::uint64_t { window = 1, released, figures, raw, raw_done };
struct record { msg kind; std::uint64_t value; };

void put(int fd, msg kind, std::uint64_t value) {
  const record r{kind, value};
  ASSERT_EQ(::send(fd, &r, sizeof(r), MSG_NOSIGNAL), static_cast<ssize_t>(sizeof(r)));
}
std::uint64_t take(int fd, msg kind) {
  record r{};
  std::size_t got = 0;
  while (got < sizeof(r)) {
    const ssize_t n = ::recv(fd, reinterpret_cast<char*>(&r) + got, sizeof(r) - got, 0);
    if (n <= 0) throw std::runtime_error("ipc test: the other process closed the socket");
    got += static_cast<std::size_t>(n);
  }
  if (r.kind != kind)
    throw std::runtime_error("ipc test: message " + std::to_string(int(r.kind)) + " where " +
                             std::to_string(int(kind)) + " was due");
  return r.value;
}

struct side_figures {
  std::uint64_t mismatches = 0;
  double export_ns = 0, import_ns = 0;
  std::uint64_t exported = 0, imported = 0;
  // Open descriptors once the first window is done (the driver has opened what it keeps by then)
  // and at the end: a leak of one per block shows as thousands.
  int fds_first = -1, fds_last = -1;
};

struct device_counter {
  unsigned long long* d = nullptr;
  device_counter() { (void)cudaMalloc(reinterpret_cast<void**>(&d), sizeof(*d)); (void)cudaMemset(d, 0, sizeof(*d)); }
  ~device_counter() { (void)cudaFree(d); }
  std::uint64_t value() const {
    unsigned long long v = 0;
    (void)cudaMemcpy(&v, d, sizeof(v), cudaMemcpyDeviceToHost);
    return v;
  }
};

// Exports `n` blocks of `pool` over `sock`, a window at a time; frees each only after the importer
// has released its window, and checks the importer's answer first.
void export_blocks(gpu_pool& pool, int sock, std::size_t n, std::uint64_t tag0, side_figures& f) {
  device_counter bad;
  struct live { void* p; std::size_t bytes; std::uint64_t tag; };
  for (std::size_t at = 0; at < n; at += window) {
    const std::size_t k = std::min(window, n - at);
    std::vector<live> blocks;
    for (std::size_t i = at; i < at + k; ++i) {
      const std::size_t bytes = block_bytes(i);
      void* p = pool.allocate(bytes);
      fill_pattern(p, bytes, tag0 + i, nullptr);
      blocks.push_back({p, bytes, tag0 + i});
    }
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    put(sock, msg::window, k);
    for (const live& b : blocks) {
      const double t0 = now_ns();
      const ipc_handle h = pool.export_block(b.p, b.bytes);
      f.export_ns += now_ns() - t0;
      ++f.exported;
      send_handle(sock, h);
    }
    ASSERT_EQ(take(sock, msg::released), k);
    for (const live& b : blocks) check_pattern(b.p, b.bytes, b.tag + answer_tag, nullptr, bad.d);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    for (const live& b : blocks) pool.deallocate(b.p, b.bytes);
    f.fds_last = open_fds();
    if (at == 0) f.fds_first = f.fds_last;
  }
  put(sock, msg::window, 0);
  f.mismatches += bad.value();
}

// Imports windows until the exporter sends an empty one; checks, answers, releases each window.
void import_blocks(int sock, std::uint64_t tag0, side_figures& f) {
  device_counter bad;
  for (std::size_t at = 0;;) {
    const std::size_t k = take(sock, msg::window);
    if (k == 0) break;
    std::vector<imported_block> blocks;
    for (std::size_t i = 0; i < k; ++i) {
      const ipc_handle h = receive_handle(sock);
      const double t0 = now_ns();
      blocks.push_back(gpu_pool::import_block(h));
      f.import_ns += now_ns() - t0;
      ++f.imported;
    }
    for (std::size_t i = 0; i < k; ++i) {
      check_pattern(blocks[i].get(), blocks[i].size(), tag0 + at + i, nullptr, bad.d);
      fill_pattern(blocks[i].get(), blocks[i].size(), tag0 + at + i + answer_tag, nullptr);
    }
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    for (auto& b : blocks) b.release();
    put(sock, msg::released, k);
    f.fds_last = open_fds();
    if (at == 0) f.fds_first = f.fds_last;
    at += k;
  }
  f.mismatches += bad.value();
}

gpu_pool_options options_for(const std::string& upstream) {
  gpu_pool_options o;
  o.device = 0;
  o.upstream = upstream == "device" ? gpu_upstream_kind::device : gpu_upstream_kind::vmm;
  return o;
}

// The child's whole life: import, then export back, then time raw cudaIpcOpenMemHandle, then
// report its figures. Returns nothing; failures show as gtest failures and the exit status.
void child_role(int sock, const std::string& upstream) {
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  ASSERT_EQ(cudaFree(nullptr), cudaSuccess);
  side_figures in, out;
  import_blocks(sock, 0, in);
  if (::testing::Test::HasFatalFailure()) return;
  {
    gpu_pool pool(options_for(upstream));
    export_blocks(pool, sock, block_count(), 1u << 24, out);
    if (::testing::Test::HasFatalFailure()) return;
    pool.trim();
    put(sock, msg::figures, pool.stats().live_bytes);
    put(sock, msg::figures, pool.stats().reserved_bytes);
  }
  // Raw CUDA IPC beside ours: open and close each handle the parent sends.
  const std::size_t raw = take(sock, msg::raw);
  double open_ns = 0;
  for (std::size_t i = 0; i < raw; ++i) {
    cudaIpcMemHandle_t h{};
    ASSERT_EQ(::recv(sock, &h, sizeof(h), MSG_WAITALL), static_cast<ssize_t>(sizeof(h)));
    void* p = nullptr;
    const double t0 = now_ns();
    ASSERT_EQ(cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess), cudaSuccess);
    open_ns += now_ns() - t0;
    ASSERT_EQ(cudaIpcCloseMemHandle(p), cudaSuccess);
  }
  const ipc_import_counts left = ipc_imports_outstanding();
  put(sock, msg::raw_done, static_cast<std::uint64_t>(open_ns));
  put(sock, msg::figures, in.mismatches + out.mismatches);
  put(sock, msg::figures, static_cast<std::uint64_t>(in.import_ns));
  put(sock, msg::figures, in.imported);
  put(sock, msg::figures, left.handles + left.ranges + left.segments);
  // Descriptors gained from the first window to the last, importing and exporting.
  put(sock, msg::figures, static_cast<std::uint64_t>(std::abs(in.fds_last - in.fds_first) +
                                                     std::abs(out.fds_last - out.fds_first)));
}

// The child process, killed and reaped if the test leaves early.
struct child_process {
  pid_t pid = -1;
  int sock = -1;
  ~child_process() {
    if (sock >= 0) ::close(sock);
    if (pid > 0) {
      ::kill(pid, SIGKILL);
      (void)::waitpid(pid, nullptr, 0);
    }
  }
  int wait() {
    int status = 0;
    if (::waitpid(pid, &status, 0) != pid) status = -1;
    pid = -1;
    return status;
  }
};

TEST(IpcGpuChild, DISABLED_ImporterRole) {
  const char* fd = std::getenv(socket_env);
  if (fd == nullptr) GTEST_SKIP() << "runs only as the second process of IpcGpu.* (which starts it)";
  GPUMEM_REQUIRE_GPU();
  const char* up = std::getenv(upstream_env);
  child_role(std::atoi(fd), up ? up : "vmm");
}

class IpcGpu : public ::testing::TestWithParam<const char*> {};

TEST_P(IpcGpu, TenThousandBlocksThereAndBack) {
  GPUMEM_REQUIRE_GPU();
  int mode = 0;
  ASSERT_EQ(cudaDeviceGetAttribute(&mode, cudaDevAttrComputeMode, 0), cudaSuccess);
  if (mode == cudaComputeModeExclusiveProcess || mode == cudaComputeModeProhibited)
    GTEST_SKIP() << "device 0's compute mode lets only one process use it";
  const std::string upstream = GetParam();
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  ASSERT_EQ(cudaFree(nullptr), cudaSuccess);
  std::size_t free_before = 0, total = 0;
  ASSERT_EQ(cudaMemGetInfo(&free_before, &total), cudaSuccess);
  const int fds_before = open_fds();

  child_process kid;
  int sv[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  // Everything the child needs is made before fork: between fork and exec it only closes, clears
  // close-on-exec and execs (the parent has CUDA's threads; allocating there could deadlock).
  std::vector<std::string> env_text{std::string(socket_env) + "=" + std::to_string(sv[1]),
                                    std::string(upstream_env) + "=" + upstream};
  std::vector<const char*> envp;
  for (char** e = environ; *e; ++e) envp.push_back(*e);
  for (const auto& e : env_text) envp.push_back(e.c_str());
  envp.push_back(nullptr);
  const char* argv[] = {"/proc/self/exe", "--gtest_filter=IpcGpuChild.DISABLED_ImporterRole",
                        "--gtest_also_run_disabled_tests", nullptr};
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::close(sv[0]);
    (void)::fcntl(sv[1], F_SETFD, 0);
    ::execve("/proc/self/exe", const_cast<char* const*>(argv), const_cast<char* const*>(envp.data()));
    ::_exit(127);
  }
  ::close(sv[1]);
  kid.pid = child;
  kid.sock = sv[0];
  const int sock = sv[0];
  side_figures f, back;
  std::uint64_t child_live = 1, child_reserved = 1;
  double raw_get_ns = 0, raw_open_ns = 0;
  constexpr std::size_t raw = 200;
  {
    gpu_pool pool(options_for(upstream));
    export_blocks(pool, sock, block_count(), 0, f);
    if (HasFatalFailure()) return;
    import_blocks(sock, 1u << 24, back);
    if (HasFatalFailure()) return;
    child_live = take(sock, msg::figures);
    child_reserved = take(sock, msg::figures);
    // cudaIpcGetMemHandle on cudaMalloc'd buffers, opened by the child.
    std::vector<void*> bufs(raw);
    for (auto& b : bufs) ASSERT_EQ(cudaMalloc(&b, 2u << 20), cudaSuccess);
    put(sock, msg::raw, raw);
    for (void* b : bufs) {
      cudaIpcMemHandle_t h{};
      const double t0 = now_ns();
      ASSERT_EQ(cudaIpcGetMemHandle(&h, b), cudaSuccess);
      raw_get_ns += now_ns() - t0;
      ASSERT_EQ(::send(sock, &h, sizeof(h), MSG_NOSIGNAL), static_cast<ssize_t>(sizeof(h)));
    }
    raw_open_ns = static_cast<double>(take(sock, msg::raw_done));
    for (void* b : bufs) ASSERT_EQ(cudaFree(b), cudaSuccess);
    pool.trim();
    EXPECT_EQ(pool.stats().live_bytes, 0u);
    EXPECT_EQ(pool.stats().reserved_bytes, 0u) << "the pool kept memory after every block came back";
  }
  const std::uint64_t child_mismatches = take(sock, msg::figures);
  const double child_import_ns = static_cast<double>(take(sock, msg::figures));
  const std::uint64_t child_imported = take(sock, msg::figures);
  const std::uint64_t child_left = take(sock, msg::figures);
  const std::uint64_t child_fds = take(sock, msg::figures);
  ::close(sock);
  kid.sock = -1;
  const int status = kid.wait();
  ASSERT_TRUE(status >= 0 && WIFEXITED(status)) << "the child process died";
  EXPECT_EQ(WEXITSTATUS(status), 0) << "the child process's checks failed (its output is above)";

  const std::size_t n = block_count();
  EXPECT_EQ(f.mismatches + back.mismatches, 0u) << "parent: blocks read back wrong";
  EXPECT_EQ(child_mismatches, 0u) << "child: blocks read back wrong";
  EXPECT_EQ(f.exported, n);
  EXPECT_EQ(back.imported, n);
  EXPECT_EQ(child_imported, n);
  EXPECT_EQ(child_live, 0u);
  EXPECT_EQ(child_reserved, 0u);
  const ipc_import_counts left = ipc_imports_outstanding();
  EXPECT_EQ(left.handles + left.ranges + left.segments, 0u) << "parent: imports not released";
  EXPECT_EQ(child_left, 0u) << "child: imports not released";
  EXPECT_EQ(f.fds_last, f.fds_first) << "parent: descriptors leaked exporting";
  EXPECT_EQ(back.fds_last, back.fds_first) << "parent: descriptors leaked importing";
  EXPECT_LE(open_fds(), fds_before + 8) << "parent: descriptors left open";
  EXPECT_EQ(child_fds, 0u) << "child: descriptors leaked";
  // Once the child is gone and the parent's pool is trimmed, the device's free memory is back (the
  // driver may take a moment to tear the child's context down).
  std::size_t free_after = 0;
  for (int i = 0; i < 50; ++i) {
    ASSERT_EQ(cudaMemGetInfo(&free_after, &total), cudaSuccess);
    if (free_after + (64u << 20) >= free_before) break;
    ::usleep(100'000);
  }
  EXPECT_GE(free_after + (64u << 20), free_before)
      << "device memory did not come back after both sides released and the child exited";

  const double us = 1e-3;
  std::printf("[ipc %s] %zu blocks each way, window %zu: export %.2f us/block, import %.2f us/block "
              "(parent), %.2f us/block (child); export+import %.2f us/block\n",
              upstream.c_str(), n, window, f.export_ns * us / double(n), back.import_ns * us / double(n),
              child_import_ns * us / double(n), (f.export_ns + child_import_ns) * us / double(n));
  std::printf("[ipc %s] same run, %zu cudaMalloc buffers of 2 MiB: cudaIpcGetMemHandle %.2f us, "
              "cudaIpcOpenMemHandle %.2f us, get+open %.2f us\n",
              upstream.c_str(), raw, raw_get_ns * us / double(raw), raw_open_ns * us / double(raw),
              (raw_get_ns + raw_open_ns) * us / double(raw));
}

INSTANTIATE_TEST_SUITE_P(Ipc, IpcGpu, ::testing::Values("vmm", "device"),
                         [](const auto& info) { return std::string(info.param); });

TEST(IpcGpuErrors, RefusalsSayWhy) {
  GPUMEM_REQUIRE_GPU();
  const int fds_before = open_fds();
  auto expect_refused = [](auto&& call, const std::string& words) {
    try {
      call();
      ADD_FAILURE() << "accepted; expected a refusal saying: " << words;
    } catch (const std::exception& e) {
      EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
    }
  };
  {
    gpu_pool pool(options_for("vmm"));
    void* p = pool.allocate(1u << 20);
    void* other = nullptr;
    ASSERT_EQ(cudaMalloc(&other, 1u << 20), cudaSuccess);
    expect_refused([&] { (void)pool.export_block(nullptr, 10); }, "at least 1 byte");
    expect_refused([&] { (void)pool.export_block(other, 100); }, "export_block");
    expect_refused([&] { (void)pool.export_block(p, std::size_t{1} << 40); }, "not mapped throughout");
    pool.deallocate(p, 1u << 20);
    ASSERT_EQ(cudaFree(other), cudaSuccess);
  }
  {
    gpu_pool_options o = options_for("vmm");
    o.shareable = false;
    gpu_pool pool(o);
    void* p = pool.allocate(4096);
    expect_refused([&] { (void)pool.export_block(p, 4096); }, "shareable handles off");
    pool.deallocate(p, 4096);
  }
  {
    gpu_pool_options o;
    o.upstream = gpu_upstream_kind::async;
    gpu_pool pool(o);
    void* p = pool.allocate(4096);
    expect_refused([&] { (void)pool.export_block(p, 4096); }, "cannot export");
    pool.deallocate(p, 4096);
  }
  {
    // A descriptor of an ordinary memory file is not a CUDA allocation.
    ipc_handle h;
    h.kind = ipc_kind::vmm;
    h.bytes = 100;
    h.piece_bytes = {2u << 20};
    h.piece_ids = {1};
    h.fds.emplace_back(::memfd_create("not-cuda", MFD_CLOEXEC));
    expect_refused([&] { (void)import_block(h); }, "cuMemImportFromShareableHandle");
    expect_refused([&] { (void)import_block(ipc_handle{}); }, "not an exported block");
  }
  const ipc_import_counts left = ipc_imports_outstanding();
  EXPECT_EQ(left.handles + left.ranges + left.segments, 0u) << "a refused import left something held";
  EXPECT_EQ(open_fds(), fds_before);
}

// What asking cuMemCreate for exportable handles costs: create + release of one granule, with and
// without, in the same run (printed; the figure is the driver's).
TEST(IpcGpuCost, ExportableHandlesBesidePlainOnes) {
  GPUMEM_REQUIRE_GPU();
  auto time_creates = [](bool shareable) {
    vmm_upstream up(0, shareable);
    const std::size_t g = up.granularity();
    constexpr int reps = 500;
    const double t0 = now_ns();
    for (int i = 0; i < reps; ++i) {
      const auto h = up.create_physical(g);
      if (!h) throw std::runtime_error("out of memory creating one granule");
      up.release_physical(*h, g);
    }
    return (now_ns() - t0) / reps * 1e-3;
  };
  (void)time_creates(false);  // warm the driver
  const double plain = time_creates(false), shareable = time_creates(true);
  const double plain2 = time_creates(false);
  std::printf("[ipc] cuMemCreate+cuMemRelease of one granule: %.2f us plain, %.2f us exportable "
              "(POSIX fd), %.2f us plain again\n", plain, shareable, plain2);
  vmm_upstream up(0, true);
  EXPECT_TRUE(up.shareable()) << up.unshareable_reason();
}

TEST(DevicePoolsGpu, CurrentDeviceZeroGetsDeviceZerosPool) {
  GPUMEM_REQUIRE_GPU();
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  device_pools pools;
  ASSERT_GE(pools.device_count(), 1);
  EXPECT_EQ(pools.find(0), nullptr);
  gpu_pool& p = pools.current();
  EXPECT_EQ(&p, &pools.get(0));
  EXPECT_EQ(&p, pools.find(0));
  void* a = p.allocate(3u << 20);
  cudaPointerAttributes attr{};
  ASSERT_EQ(cudaPointerGetAttributes(&attr, a), cudaSuccess);
  EXPECT_EQ(attr.device, 0);
  device_counter bad;
  fill_pattern(a, 3u << 20, 7, nullptr);
  check_pattern(a, 3u << 20, 7, nullptr, bad.d);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(bad.value(), 0u);
  p.deallocate(a, 3u << 20);
  EXPECT_THROW(pools.get(pools.device_count()), std::out_of_range);
  EXPECT_EQ(&current_device_pool(), &default_device_pools().get(0));
  EXPECT_EQ(&current_device_pool(), &current_device_pool());
}

}  // namespace
}  // namespace gpumem::test
