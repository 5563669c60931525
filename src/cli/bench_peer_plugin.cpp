// The C peer interface (src/cli/bench_peer.h) behind bench_allocator: each call goes
// through one function pointer, as a virtual call would; a failure the peer reports in its error
// buffer becomes the exception bench_patterns records against the pattern.
#include "bench_peer_plugin.hpp"

#include <dlfcn.h>
#include <fmt/core.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <system_error>
#include <stdexcept>
#include <string>

#include "bench_peer.h"

namespace gpumem::tools {
namespace {

class plugin_peer final : public bench_allocator {
 public:
  explicit plugin_peer(const gpumem_bench_peer& p) : p_(p) {
    self_ = p_.open(err_.data(), err_.size());
    if (!self_) fail("open");
  }
  ~plugin_peer() override { p_.close(self_); }
  plugin_peer(const plugin_peer&) = delete;
  plugin_peer& operator=(const plugin_peer&) = delete;

  std::string name() const override { return p_.name; }
  std::string device() const override { return p_.device; }
  void* alloc(std::size_t bytes, stream_ref s) override {
    void* p = p_.alloc(self_, bytes, s.value(), err_.data(), err_.size());
    if (!p) [[unlikely]]
      fail(fmt::format("alloc of {} B", bytes));
    return p;
  }
  void free(void* p, std::size_t bytes, stream_ref s) override {
    p_.free(self_, p, bytes, s.value());
  }
  stream_ref create_stream() override {
    if (!p_.create_stream) return {};
    const std::uintptr_t s = p_.create_stream(self_, err_.data(), err_.size());
    if (!s) fail("create_stream");
    return static_cast<stream_ref>(s);
  }
  void destroy_stream(stream_ref s) override {
    if (p_.destroy_stream) p_.destroy_stream(self_, s.value());
  }
  void synchronize() override {
    if (p_.synchronize) p_.synchronize(self_);
  }

 private:
  [[noreturn]] void fail(const std::string& what) {
    err_.back() = '\0';  // whatever the peer wrote, the message ends inside the buffer
    throw std::runtime_error(
        fmt::format("{}: {} failed: {}", p_.name, what, err_[0] ? err_.data() : "(the peer gave no reason)"));
  }

  const gpumem_bench_peer& p_;
  void* self_ = nullptr;
  std::array<char, 512> err_{};
};

}  // namespace

bench_peer_lib load_bench_peer(const std::filesystem::path& path) {
  // A path without a slash would be looked up in the library search path, not where the user
  // points: make it explicit.
  const std::string where = path.has_parent_path() ? path.string() : "./" + path.string();
  void* lib = dlopen(where.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char* e = dlerror();
    throw std::runtime_error(fmt::format("cannot be loaded: {}", e ? e : "unknown reason"));
  }
  dlerror();
  void* sym = dlsym(lib, GPUMEM_BENCH_PEER_SYMBOL);
  if (!sym)
    throw std::runtime_error(
        fmt::format("exports no {} function (see src/cli/bench_peer.h)", GPUMEM_BENCH_PEER_SYMBOL));
  const auto entry = reinterpret_cast<gpumem_bench_peer_fn>(sym);
  const gpumem_bench_peer* p = entry(GPUMEM_BENCH_PEER_ABI);
  if (!p)
    throw std::runtime_error(
        fmt::format("does not speak the peer interface version {} this gpumem speaks", GPUMEM_BENCH_PEER_ABI));
  if (p->abi != GPUMEM_BENCH_PEER_ABI)
    throw std::runtime_error(fmt::format("answered for interface version {}, asked for {}", p->abi, GPUMEM_BENCH_PEER_ABI));
  if (!p->name || !*p->name) throw std::runtime_error("its peer has no name");
  const std::string device = p->device ? p->device : "";
  if (device != "gpu" && device != "host" && device != "simulated")
    throw std::runtime_error(fmt::format("its peer {} names device \"{}\", not gpu, host or simulated", p->name, device));
  if (!p->open || !p->close || !p->alloc || !p->free)
    throw std::runtime_error(fmt::format("its peer {} lacks open, close, alloc or free", p->name));
  if (!p->create_stream != !p->destroy_stream)
    throw std::runtime_error(fmt::format("its peer {} has only one of create_stream and destroy_stream", p->name));
  return {{p->name, [p] { return std::unique_ptr<bench_allocator>(new plugin_peer(*p)); }}, device};
}

std::vector<std::filesystem::path> peer_libs_beside() {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path dir;
  if (const char* env = std::getenv("GPUMEM_BENCH_PEER_DIR"); env && *env) dir = env;
  else dir = fs::read_symlink("/proc/self/exe", ec).parent_path();
  std::vector<fs::path> out;
  if (ec || dir.empty()) return out;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.starts_with("libgpumem_") && name.ends_with("_peer.so") && it->is_regular_file(ec)) out.push_back(it->path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace gpumem::tools
