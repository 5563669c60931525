#pragma once
// Replay on the GPU: adds `gpu-pool` (gpumem's pool on the virtual-memory upstream),
// `gpu-pool-segments` (the pool on cudaMalloc segments) and `cuda-malloc-async` (the device's
// default cudaMemPool, release threshold at its maximum) to `gpumem::replay`. Each throws a clear
// error at construction when no GPU is visible.
namespace gpumem {
void register_gpu_replay_targets();
}  // namespace gpumem
