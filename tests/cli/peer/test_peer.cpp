// A peer for `gpumem bench --peer-lib` in the CLI tests: glibc malloc on the host, named
// "test-peer". Environment switches make it misbehave on purpose:
//   GPUMEM_TEST_PEER_ABI=N          answers as if it spoke interface version N
//   GPUMEM_TEST_PEER_REFUSE=1       speaks no version gpumem asks for (returns NULL)
//   GPUMEM_TEST_PEER_FAIL_OVER=N    alloc fails for requests over N bytes, with a reason
//   GPUMEM_TEST_PEER_DEVICE=NAME    claims its memory lives on NAME
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <new>

#include "bench_peer.h"

namespace {

struct state {
  std::size_t fail_over = 0;  // 0: never
  std::atomic<std::size_t> live{0};  // blocks out (threads pattern: from many threads at once)
};

void* peer_open(char* err, std::size_t err_bytes) {
  auto* s = new (std::nothrow) state;
  if (!s) {
    std::snprintf(err, err_bytes, "test-peer: no host memory for its state");
    return nullptr;
  }
  if (const char* v = std::getenv("GPUMEM_TEST_PEER_FAIL_OVER")) s->fail_over = std::strtoull(v, nullptr, 10);
  return s;
}

void peer_close(void* self) {
  auto* s = static_cast<state*>(self);
  // The bench gives every block back before it closes a peer.
  if (const std::size_t n = s->live.load()) std::fprintf(stderr, "test-peer: closed with %zu blocks never freed\n", n);
  delete s;
}

void* peer_alloc(void* self, std::size_t bytes, std::uintptr_t, char* err, std::size_t err_bytes) {
  auto* s = static_cast<state*>(self);
  if (s->fail_over && bytes > s->fail_over) {
    std::snprintf(err, err_bytes, "test-peer refuses %zu B (GPUMEM_TEST_PEER_FAIL_OVER=%zu)", bytes, s->fail_over);
    return nullptr;
  }
  void* p = std::malloc(bytes);
  if (!p) {
    std::snprintf(err, err_bytes, "malloc(%zu) returned NULL", bytes);
    return nullptr;
  }
  ++s->live;
  return p;
}

void peer_free(void* self, void* p, std::size_t, std::uintptr_t) {
  --static_cast<state*>(self)->live;
  std::free(p);
}

gpumem_bench_peer peer{GPUMEM_BENCH_PEER_ABI, "test-peer", "host", peer_open, peer_close, peer_alloc, peer_free,
                       nullptr, nullptr, nullptr};

}  // namespace

extern "C" __attribute__((visibility("default"))) const gpumem_bench_peer* gpumem_bench_peer_entry(int abi) {
  if (std::getenv("GPUMEM_TEST_PEER_REFUSE")) return nullptr;
  if (abi != GPUMEM_BENCH_PEER_ABI) return nullptr;
  if (const char* v = std::getenv("GPUMEM_TEST_PEER_ABI")) peer.abi = std::atoi(v);
  if (const char* v = std::getenv("GPUMEM_TEST_PEER_DEVICE")) peer.device = v;
  return &peer;
}
