#!/usr/bin/env python3
"""Host cost of one tensor allocation through PyTorch: `torch.empty` then `del`, in a loop, with
PyTorch's caching allocator and with gpumem's (through torch.cuda.memory.CUDAPluggableAllocator),
each in a fresh process, twice, interleaved. `cupy-pool` and `cupy-gpumem[:options]` do the same
with `cupy.empty` through CuPy's MemoryPool and through gpumem.cupy. The difference is what a model pays per tensor for the
allocator and the pluggable interface together; the models' step times (bench_models.py) include
it. native-async against pluggable-async (fresh_runs.PEERS) isolates the interface's share.

    python3 integrations/bench_alloc_loop.py [--iters N] [--sizes 512,1048576,...]
                                             [--allocators native,gpumem,native-async,pluggable-async]
"""
import argparse
import json
import sys
import time

from fresh_runs import PEERS, gpumem_options, run_children, use_torch_allocator


def child(alloc, iters, sizes):
    if alloc.startswith("cupy-"):
        if alloc.startswith("cupy-gpumem"):
            import gpumem.cupy
            gpumem.cupy.use(**gpumem_options(alloc[len("cupy-"):]))
        import cupy
        import numpy
        empty = lambda size: cupy.empty(size, dtype=numpy.uint8)  # noqa: E731
        sync, version = cupy.cuda.Device().synchronize, "cupy " + cupy.__version__
    else:
        use_torch_allocator(alloc)
        import torch
        dev = torch.device("cuda")
        empty = lambda size: torch.empty(size, dtype=torch.uint8, device=dev)  # noqa: E731
        sync, version = torch.cuda.synchronize, "torch " + torch.__version__
    out = {}
    for size in sizes:
        for _ in range(100):  # warm: the first allocation of a size may reach the device
            empty(size)
        sync()
        runs = []
        for _ in range(5):
            t0 = time.perf_counter()
            for _ in range(iters):
                x = empty(size)
                del x
            runs.append((time.perf_counter() - t0) / iters * 1e9)
        out[str(size)] = sorted(runs)[len(runs) // 2]
    print(json.dumps({"allocator": alloc, "ns_per_empty_del_median_of_5": out, "library": version}))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--iters", type=int, default=20000)
    ap.add_argument("--sizes", default="512,1048576,67108864")
    ap.add_argument("--allocators", default="native,gpumem",
                    help="comma-separated: native, gpumem[:options], cupy-pool, cupy-gpumem[:options], "
                         + ", ".join(PEERS))
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",") if s]
    if args.child:
        child(args.child, args.iters, sizes)
        return 0
    rows = {}
    try:
        allocs = [a.strip() for a in args.allocators.split(",") if a.strip()]
        for line in run_children(__file__, allocs * 2,
                                 ["--iters", str(args.iters), "--sizes", args.sizes]):
            print(json.dumps(line), flush=True)
            rows.setdefault(line["allocator"], []).append(line["ns_per_empty_del_median_of_5"])
    except RuntimeError as e:
        print(e, file=sys.stderr)
        return 1
    print(f"\n{'size (B)':>12}" + "".join(f"{a[:20] + ' ns':>24}" for a in rows))
    for s in sizes:
        print(f"{s:>12}" + "".join(f"{' / '.join(f'{x[str(s)]:.0f}' for x in r):>24}" for r in rows.values()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
