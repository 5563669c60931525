#pragma once
// `gpumem bench --peer-lib PATH`: a peer allocator from a shared library that speaks
// src/cli/bench_peer.h, wrapped as one more bench_allocator_maker, timed in this process
// beside gpumem and the built-in peers.
#include <filesystem>
#include <string>
#include <vector>

#include "bench_allocators.hpp"

namespace gpumem::tools {

struct bench_peer_lib {
  bench_allocator_maker maker;
  std::string device;  // "gpu", "host" or "simulated": which runs it can join
};

// Loads `path` and returns a maker for the peer it offers. Throws std::runtime_error saying what
// is wrong (the caller names the library): it cannot be loaded (the loader's own message), it does not export
// GPUMEM_BENCH_PEER_SYMBOL, it does not speak GPUMEM_BENCH_PEER_ABI, or what it returned lacks a
// name, a known device or a required function. The library stays loaded for the process's life:
// a peer such as PyTorch registers exit handlers of its own.
bench_peer_lib load_bench_peer(const std::filesystem::path& path);

// Peer libraries `gpumem bench` takes without being told: every libgpumem_*_peer.so in
// $GPUMEM_BENCH_PEER_DIR if set, else in the running executable's folder (where the build puts
// libgpumem_torch_peer.so), sorted by name. None if the folder cannot be read.
std::vector<std::filesystem::path> peer_libs_beside();

}  // namespace gpumem::tools
