"""What the benchmark scripts here share: naming an allocator ("native", "gpumem", gpumem with pool
options, "gpumem:max_reserved_bytes=8G,upstream=device", or a peer that is not gpumem: "native-async",
PyTorch's own cudaMallocAsync backend, and "pluggable-async", the same cudaMallocAsync behind
PyTorch's pluggable interface), installing it in a fresh process, and running one child process per
allocator, interleaved, each printing one JSON line last."""
import json
import os
import subprocess
import sys

# Allocators that are not gpumem, compared with native like gpumem. Their difference is what
# CUDAPluggableAllocator itself costs, whatever allocator is behind it.
PEERS = ["native-async", "pluggable-async"]
PROBE_LIB = "libgpumem_pluggable_probe.so"  # built beside libgpumem_torch.so (integrations/CMakeLists.txt)


def gpumem_options(alloc):
    """"gpumem" -> {}; "gpumem:initial_reserve=8G,upstream=device" -> those pool options. `settle=1` is
    no pool option but the run's own (wants_settle) and is left out."""
    _, _, text = alloc.partition(":")
    opts = {}
    for item in filter(None, text.split(",")):
        key, _, value = item.partition("=")
        if key.strip() != "settle":
            opts[key.strip()] = value.strip()
    return opts


def wants_settle(alloc):
    """"gpumem:settle=1,...": the run calls gpumem.settle() where each step ends."""
    _, _, text = alloc.partition(":")
    return any(item.strip() in ("settle=1", "settle=true") for item in text.split(","))


def child_env(alloc):
    """The environment a child for `alloc` starts with: PyTorch reads its allocator backend when it
    sets the allocator up, so native-async must be chosen before the child starts."""
    env = dict(os.environ)
    if alloc == "native-async":
        env["PYTORCH_CUDA_ALLOC_CONF"] = "backend:cudaMallocAsync"
    return env


def use_torch_allocator(alloc):
    """In a fresh process, before any CUDA tensor: PyTorch's own allocator, gpumem's, or the
    cudaMallocAsync probe behind the pluggable interface."""
    if alloc.startswith("gpumem"):
        import gpumem.torch
        gpumem.torch.use(**gpumem_options(alloc))
    elif alloc == "pluggable-async":
        import torch
        from gpumem import _lib
        probe = os.path.join(os.path.dirname(_lib.library_path()), PROBE_LIB)
        torch.cuda.memory.change_current_allocator(
            torch.cuda.memory.CUDAPluggableAllocator(probe, "probe_alloc", "probe_free"))


def run_children(script, allocs, args):
    """Runs `script --child ALLOC ARGS...` once per entry of `allocs`, in order, and yields the
    JSON object each printed last; raises RuntimeError with the child's stderr if one fails."""
    for alloc in allocs:
        r = subprocess.run([sys.executable, script, "--child", alloc, *args], capture_output=True, text=True,
                           env=child_env(alloc))
        if r.returncode != 0:
            raise RuntimeError(f"{alloc}: exit {r.returncode}\n{r.stderr[-2000:]}")
        yield json.loads(r.stdout.strip().splitlines()[-1])
