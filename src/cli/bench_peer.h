/* Peers for `gpumem bench` from shared libraries.
 *
 * `gpumem bench --peer-lib PATH` loads PATH (dlopen) and times the allocator it offers beside
 * gpumem's and the built-in peers, in the same process, on the same patterns, with the same
 * tables and ratios. PyTorch's caching allocator comes this way (bench/torch/torch_peer.cpp), so
 * gpumem never links torch; RMM or any other allocator can be added the same way.
 *
 * A C interface on purpose: a peer is built with its own compiler, standard library and CUDA
 * runtime (PyTorch ships its own), so no C++ object, exception or std::string crosses it. A call
 * that fails writes a message into the caller's buffer (NUL-terminated, at most err_bytes bytes
 * including the NUL) and returns NULL (or 0 for a stream); the bench records the message against
 * the pattern it was running, as it does for the built-in peers.
 *
 * The library exports one function, GPUMEM_BENCH_PEER_SYMBOL, which returns its peer for the ABI
 * version asked for, or NULL if it does not speak that version. */
#ifndef GPUMEM_BENCH_PEER_H
#define GPUMEM_BENCH_PEER_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Raised whenever the struct below changes shape or meaning. */
#define GPUMEM_BENCH_PEER_ABI 1
#define GPUMEM_BENCH_PEER_SYMBOL "gpumem_bench_peer_entry"

typedef struct gpumem_bench_peer {
  int abi;            /* GPUMEM_BENCH_PEER_ABI, as built */
  const char* name;   /* the allocator's column in the tables, e.g. "torch-caching" */
  /* Where its memory lives: "gpu" (needs a GPU run), "host" or "simulated" (runs with --simulate
   * or without a GPU). */
  const char* device;
  /* A fresh allocator: the bench opens one per pattern (and per replayed trace) and closes it
   * before the next, so what one pattern leaves cached neither helps nor hinders the next. */
  void* (*open)(char* err, size_t err_bytes);
  /* Waits for the device work given so far, then gives everything it caches back. */
  void (*close)(void* self);
  /* `bytes` (> 0) ordered on `stream` (a cudaStream_t on the GPU, 0 the default stream). */
  void* (*alloc)(void* self, size_t bytes, uintptr_t stream, char* err, size_t err_bytes);
  /* `p` from alloc with the same `bytes`; `stream` is the one it is freed on (a trace may free on
   * another stream than it allocated on). */
  void (*free)(void* self, void* p, size_t bytes, uintptr_t stream);
  /* Optional (NULL: every thread of the threads pattern uses stream 0). A stream for one thread,
   * made before the clock starts; 0 with `err` filled on failure. */
  uintptr_t (*create_stream)(void* self, char* err, size_t err_bytes);
  void (*destroy_stream)(void* self, uintptr_t stream); /* optional, with create_stream */
  void (*synchronize)(void* self);                      /* optional: between timed runs */
} gpumem_bench_peer;

typedef const gpumem_bench_peer* (*gpumem_bench_peer_fn)(int abi);

#ifdef __cplusplus
}
#endif

#endif /* GPUMEM_BENCH_PEER_H */
