#!/usr/bin/env python3
"""On a GPU machine with PyTorch: after gpumem.torch.use(), torch.cuda's memory functions answer
from gpumem and agree with each other and with the tensors alive. Installs nothing; prints one
PASS/FAIL line a check and exits 1 if any failed (2 if it cannot start).

    python3 integrations/check_torch_api.py             # the installed gpumem (pip install .)
    PYTHONPATH=integrations/python python3 integrations/check_torch_api.py   # a CMake build tree

Checked: memory_allocated, max_memory_allocated, memory_reserved, max_memory_reserved,
memory_stats (PyTorch's documented keys, equal to the functions' answers), memory_summary,
reset_peak_memory_stats, empty_cache, the device argument's spellings, an out-of-memory
request counted in num_ooms, and torch.cuda.graph(pool=...) through gpumem's graph pool hooks.
"""
import os
import sys

FAILS = []


def check(name, ok, detail=""):
    print(("PASS " if ok else "FAIL ") + name + (f"  ({detail})" if detail else ""), flush=True)
    if not ok:
        FAILS.append(name)


def main():
    try:
        import torch
    except ImportError as e:
        print(f"check_torch_api: PyTorch is needed: {e}", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("check_torch_api: no CUDA device visible", file=sys.stderr)
        return 2
    try:
        import gpumem
        import gpumem.torch
    except ImportError:   # not installed: the repository's package beside this script
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "python"))
        import gpumem
        import gpumem.torch
    print(f"gpumem {gpumem.__version__} from {gpumem.__file__}; torch {torch.__version__}", flush=True)
    gpumem.torch.use()
    print(f"library {gpumem.library_path()}; hooks {gpumem.torch.hooks}", flush=True)
    cuda = torch.cuda
    mib = 1 << 20

    check("use() replaced torch.cuda's memory functions",
          all(getattr(cuda, n) is getattr(gpumem.torch, n) for n in (
              "memory_allocated", "max_memory_allocated", "memory_reserved", "max_memory_reserved",
              "memory_stats", "reset_peak_memory_stats", "empty_cache")),
          ", ".join(gpumem.torch.patched))

    base = cuda.memory_allocated()
    a = torch.empty(64 * mib, dtype=torch.uint8, device="cuda")
    b = torch.ones(16 * mib // 4, dtype=torch.float32, device="cuda")
    cuda.synchronize()
    live = a.numel() + b.numel() * 4
    alloc, peak = cuda.memory_allocated(), cuda.max_memory_allocated()
    reserved, peak_reserved = cuda.memory_reserved(), cuda.max_memory_reserved()
    check("memory_allocated >= the live tensors' bytes", alloc >= base + live, f"{alloc} vs {base} + {live}")
    check("max_memory_allocated >= memory_allocated", peak >= alloc, f"{peak} vs {alloc}")
    check("memory_reserved >= memory_allocated", reserved >= alloc, f"{reserved} vs {alloc}")
    check("max_memory_reserved >= memory_reserved", peak_reserved >= reserved, f"{peak_reserved} vs {reserved}")
    check("the figures are gpumem.stats()'s", gpumem.stats()["live_bytes"] == alloc and
          gpumem.stats()["reserved_bytes"] == reserved)

    stats = cuda.memory_stats()
    documented = ("allocated_bytes.all.current", "allocated_bytes.all.peak", "reserved_bytes.all.current",
                  "reserved_bytes.all.peak", "active_bytes.all.current", "requested_bytes.all.current",
                  "allocation.all.current", "allocation.all.allocated", "allocation.all.freed",
                  "segment.all.current", "num_alloc_retries", "num_ooms", "num_device_alloc",
                  "num_device_free")
    missing = [k for k in documented if k not in stats]
    check("memory_stats has PyTorch's documented keys", not missing, f"missing {missing}")
    check("memory_stats agrees with the functions",
          stats.get("allocated_bytes.all.current") == alloc and stats.get("allocated_bytes.all.peak") == peak
          and stats.get("reserved_bytes.all.current") == reserved
          and stats.get("reserved_bytes.all.peak") == peak_reserved,
          {k: stats.get(k) for k in documented[:4]})
    check("memory_stats counts the live tensors", stats.get("allocation.all.current", 0) >= 2
          and stats.get("allocation.all.allocated", 0) >= stats.get("allocation.all.current", 0))
    check("memory_stats_as_nested_dict nests the same figures",
          cuda.memory_stats_as_nested_dict()["allocated_bytes"]["all"]["current"] == alloc)
    summary = cuda.memory_summary()
    check("memory_summary gives text", isinstance(summary, str) and "reserved" in summary, summary[:80])

    index = cuda.current_device()
    spellings = [cuda.memory_allocated(d) for d in (None, index, f"cuda:{index}", torch.device("cuda", index))]
    check("the device argument's spellings agree", len(set(spellings)) == 1, spellings)

    del a
    cuda.synchronize()
    after_free = cuda.memory_allocated()
    check("memory_allocated falls by the freed tensor", after_free <= alloc - 64 * mib, f"{after_free} vs {alloc}")
    check("max_memory_allocated keeps the peak", cuda.max_memory_allocated() == peak)
    cuda.reset_peak_memory_stats()
    check("reset_peak_memory_stats: max_memory_allocated == memory_allocated",
          cuda.max_memory_allocated() == cuda.memory_allocated(),
          f"{cuda.max_memory_allocated()} vs {cuda.memory_allocated()}")
    check("reset_peak_memory_stats: max_memory_reserved == memory_reserved",
          cuda.max_memory_reserved() == cuda.memory_reserved())

    before = cuda.memory_reserved()
    cuda.empty_cache()
    after = cuda.memory_reserved()
    check("empty_cache lowers or keeps memory_reserved", after <= before, f"{before} -> {after}")
    check("empty_cache keeps what live tensors hold", after >= cuda.memory_allocated() and b.sum().item() == b.numel())
    check("empty_cache hands back the freed 64 MiB", after < cuda.memory_allocated() + 64 * mib,
          f"{before} -> {after}, live {cuda.memory_allocated()}")

    ooms = cuda.memory_stats()["num_ooms"]
    try:
        # Twice the device: a real out-of-memory (an absurd size, past 2^47 bytes, is refused as a bad
        # argument instead, not counted as a failed allocation).
        torch.empty(2 * torch.cuda.get_device_properties(0).total_memory, dtype=torch.uint8, device="cuda")
        raised = False
    except (RuntimeError, MemoryError):   # PyTorch turns the pluggable allocator's throw into RuntimeError
        raised = True
    check("a request beyond the device raises", raised)
    check("num_ooms counts it", cuda.memory_stats()["num_ooms"] == ooms + 1,
          f"{ooms} -> {cuda.memory_stats()['num_ooms']}")

    del b
    cuda.synchronize()
    check("memory_allocated is back at the start", cuda.memory_allocated() == base,
          f"{cuda.memory_allocated()} vs {base}")
    # Last: the matmuls below make PyTorch keep a cuBLAS workspace per stream for good.
    graph_checks(torch)
    print(f"{len(FAILS)} failed" if FAILS else "all checks passed")
    return 1 if FAILS else 0


def graph_checks(torch):
    """torch.cuda.graph(pool=...) through gpumem's graph pool hooks: a capture that allocates and
    frees temporaries, replayed, matches the eager result; a second graph shares the pool."""
    if not all(gpumem_hooks().get(k) for k in ("graph_pool_begin", "graph_pool_end", "graph_pool_release")):
        print("SKIP torch.cuda.graph: this torch exposes no graph pool hooks for pluggable allocators", flush=True)
        return
    cuda = torch.cuda
    x = torch.randn(1024, 1024, device="cuda")
    w = torch.randn(1024, 1024, device="cuda")

    def step(inp):
        h = inp @ w              # temporaries allocated and freed inside the capture
        p = torch.softmax(h, dim=-1)
        return inp + p @ w

    side = cuda.Stream()
    side.wait_stream(cuda.current_stream())
    with cuda.stream(side):     # warm up on a side stream, as PyTorch's recipe does
        for _ in range(2):
            step(x)
    cuda.current_stream().wait_stream(side)
    eager = step(x)
    cuda.synchronize()
    warm = cuda.memory_allocated()  # inputs, the eager result and cuBLAS's workspaces
    pool = cuda.graph_pool_handle()
    g1, g2 = cuda.CUDAGraph(), cuda.CUDAGraph()
    try:
        with cuda.graph(g1, pool=pool):
            out1 = step(x)
        with cuda.graph(g2, pool=pool):
            out2 = step(out1)
    except Exception as e:   # noqa: BLE001  (report what the capture raised)
        check("torch.cuda.graph captures through gpumem", False, repr(e))
        return
    for _ in range(100):
        g1.replay()
        g2.replay()
    cuda.synchronize()
    # cuBLAS may pick another kernel under capture: equal to rounding, not bit for bit.
    check("torch.cuda.graph replays match the eager step", torch.allclose(out1, eager, rtol=1e-4, atol=1e-4))
    check("a second graph on the same pool replays too", torch.allclose(out2, step(eager), rtol=1e-4, atol=1e-4))
    del g1, g2, out1, out2
    cuda.synchronize()
    check("the graphs' memory is given back with them", cuda.memory_allocated() <= warm,
          f"{cuda.memory_allocated()} vs {warm} before the captures")


def gpumem_hooks():
    import gpumem.torch
    return gpumem.torch.hooks


if __name__ == "__main__":
    sys.exit(main())
