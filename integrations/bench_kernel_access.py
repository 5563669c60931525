#!/usr/bin/env python3
"""Are kernels as fast on gpumem's memory as on PyTorch's? A 1 GiB copy (streaming; of ones and of random floats) and a random
gather over 1 GiB (every access a different page: the GPU's TLB reach matters), with PyTorch's
allocator and with gpumem's, each in a fresh process, interleaved; CUDA-event timing, medians.

    python3 integrations/bench_kernel_access.py [--mib 1024] [--reps 30]
"""
import argparse
import json
import sys

from fresh_runs import run_children, use_torch_allocator


def child(alloc, mib, reps):
    use_torch_allocator(alloc)
    import torch
    dev = torch.device("cuda")
    n = mib << 20
    src = torch.ones(n // 4, dtype=torch.float32, device=dev)
    rnd = torch.rand(n // 4, dtype=torch.float32, device=dev)  # incompressible, unlike ones
    dst = torch.empty_like(src)
    idx = torch.randint(0, n // 4, (1 << 24,), device=dev)
    out = {}
    for name, fn in {"copy_GBps": lambda: dst.copy_(src), "copy_random_GBps": lambda: dst.copy_(rnd), "gather_ms": lambda: torch.index_select(src, 0, idx)}.items():
        for _ in range(3):
            fn()
        times = []
        for _ in range(reps):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn()
            b.record()
            b.synchronize()
            times.append(a.elapsed_time(b))
        ms = sorted(times)[len(times) // 2]
        out[name] = (2 * n / (ms / 1e3) / 1e9) if name.startswith("copy") else ms
    print(json.dumps({"allocator": alloc, **out}))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mib", type=int, default=1024)
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child, args.mib, args.reps)
        return 0
    # gpumem:upstream=device: gpumem's pool on cudaMalloc segments instead of mapped 2 MiB granules.
    allocs = ["native", "gpumem", "gpumem:upstream=device"] * 2
    try:
        for line in run_children(__file__, allocs, ["--mib", str(args.mib), "--reps", str(args.reps)]):
            print(json.dumps(line), flush=True)
    except RuntimeError as e:
        print(e, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
