"""What the benchmark scripts here share: naming an allocator ("native", "gpumem", or gpumem with
pool options, "gpumem:idle_budget=0.1,upstream=device"), installing it in a fresh process, and
running one child process per allocator, interleaved, each printing one JSON line last."""
import json
import os
import subprocess
import sys


def gpumem_options(alloc):
    """"gpumem" -> {}; "gpumem:idle_budget=0.1,front_cache=0" -> those pool options."""
    _, _, text = alloc.partition(":")
    opts = {}
    for item in filter(None, text.split(",")):
        key, _, value = item.partition("=")
        opts[key.strip()] = value.strip()
    return opts


def use_torch_allocator(alloc):
    """In a fresh process, before any CUDA tensor: PyTorch's own allocator, or gpumem's."""
    if alloc.startswith("gpumem"):
        import gpumem.torch
        gpumem.torch.use(**gpumem_options(alloc))


def run_children(script, allocs, args):
    """Runs `script --child ALLOC ARGS...` once per entry of `allocs`, in order, and yields the
    JSON object each printed last; raises RuntimeError with the child's stderr if one fails."""
    for alloc in allocs:
        r = subprocess.run([sys.executable, script, "--child", alloc, *args], capture_output=True, text=True,
                           env=os.environ)
        if r.returncode != 0:
            raise RuntimeError(f"{alloc}: exit {r.returncode}\n{r.stderr[-2000:]}")
        yield json.loads(r.stdout.strip().splitlines()[-1])
