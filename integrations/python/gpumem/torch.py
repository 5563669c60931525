"""gpumem as PyTorch's CUDA allocator.

    import gpumem.torch
    gpumem.torch.use()          # first thing: before any CUDA tensor exists

Through torch.cuda.memory.CUDAPluggableAllocator. What that interface leaves out, and how use()
stands in (see the README, "PyTorch and CuPy"):
  torch.cuda.memory_stats / memory_allocated / max_memory_allocated / memory_reserved /
  max_memory_reserved / reset_peak_memory_stats raise or answer nothing for a pluggable allocator
  ("does not yet support getDeviceStats")  -> use() replaces them with gpumem-backed ones (below)
  torch.cuda.empty_cache() reaches it only through a reset hook  -> use() replaces it with
  gpumem's trim of every device's pool (and wires the hook where this torch exposes set_reset_fn)
  Tensor.record_stream reaches it only through a record-stream hook -> wired here when this torch
  exposes set_record_stream_fn; gpumem.record_stream() always works
  torch.cuda.graph(pool=...) reaches it only through the graph pool hooks -> wired here when this
  torch exposes set_begin_allocate_to_pool, set_end_allocate_to_pool_fn and set_release_pool
"""
from __future__ import annotations

import collections

import torch as _torch

from . import _lib, reset_peaks, stats

_allocator = None   # kept alive: PyTorch holds only the C++ side
hooks: dict = {}    # which optional hooks this torch accepted: {"record_stream": bool, "empty_cache": bool,
                    # "graph_pool_begin"/"graph_pool_end"/"graph_pool_release": bool}
patched: tuple = ()  # the torch.cuda functions use() replaced


def use(**options):
    """Makes gpumem PyTorch's CUDA allocator, with pool options as keywords (the fields of
    gpumem::pool_options, docs/options.md: max_reserved_bytes=..., release_threshold_bytes=...,
    initial_reserve_bytes="8G" to reserve the job's memory up front, small_max_bytes=...,
    zero_on_free=True; upstream="vmm"|"device"|"async"; trace="job-{pid}.csv"), on top of
    GPUMEM_CONFIG. An option given nowhere keeps the library's default, the same as in C++ and on
    the command line. An unknown key or bad value raises ValueError naming it. Then torch.cuda's memory statistics and empty_cache() answer from gpumem
    (see `patched`). Must run before the first CUDA allocation: PyTorch refuses to swap an
    allocator in use. Calling it again after success is a no-op (and options must then be empty)."""
    global _allocator
    if _allocator is not None:
        if options:
            raise RuntimeError("gpumem.torch.use: already in use; options are fixed")
        return _allocator
    _lib.configure(options)
    path = _lib.library_path()
    alloc = _torch.cuda.memory.CUDAPluggableAllocator(path, "gpumem_alloc", "gpumem_free")
    raw = alloc.allocator()
    # Optional hooks of torch._C._CUDAPluggableAllocator (torch/csrc/cuda/Module.cpp); the
    # Python wrapper never sets them, so without these Tensor.record_stream and empty_cache are
    # silently no-ops for a pluggable allocator.
    # The graph pool hooks (torch.cuda.graph(pool=...), graph_pool_handle()) route a capture's
    # allocations to a gpumem graph pool; without them a capture allocates from the ordinary pool
    # and gpumem refuses to record an event into it (see docs/pytorch.md).
    for hook, setter, fn in (("record_stream", "set_record_stream_fn", "gpumem_record_stream"),
                             ("empty_cache", "set_reset_fn", "gpumem_trim_all"),
                             ("graph_pool_begin", "set_begin_allocate_to_pool",
                              "gpumem_torch_begin_allocate_to_pool"),
                             ("graph_pool_end", "set_end_allocate_to_pool_fn",
                              "gpumem_torch_end_allocate_to_pool"),
                             ("graph_pool_release", "set_release_pool", "gpumem_torch_release_pool")):
        set_fn = getattr(raw, setter, None)
        ok = False
        if callable(set_fn):
            try:
                set_fn(_lib.function_address(fn))
                ok = True
            except Exception:   # an older torch with another signature: keep the plain allocator
                ok = False
        hooks[hook] = ok
    _torch.cuda.memory.change_current_allocator(alloc)
    _allocator = alloc
    _patch_torch_cuda()
    return alloc


def in_use() -> bool:
    return _allocator is not None


# ---- torch.cuda's memory statistics, answered from gpumem.stats() ----

def _index(device) -> int:
    """torch's device argument (None: the current device, an int, "cuda:1", torch.device)."""
    if device is None:
        return _torch.cuda.current_device()
    if isinstance(device, str):
        device = _torch.device(device)
    if isinstance(device, _torch.device):
        if device.type != "cuda":
            raise ValueError(f"gpumem: not a CUDA device: {device}")
        return _torch.cuda.current_device() if device.index is None else device.index
    return int(device)


def memory_stats(device=None) -> dict:
    """torch.cuda.memory_stats() from gpumem's pool: the keys PyTorch documents that gpumem
    counts, for the pool "all" (gpumem keeps no large/small pools apart), and every figure of
    gpumem.stats() as "gpumem.<name>". Bytes are the bytes requested: allocated_bytes, active_bytes
    and requested_bytes agree. num_alloc_retries is 0: gpumem's pool reclaims what it caches before
    it grows rather than after a failed device allocation, and does not count a retry."""
    s = stats(_index(device))
    live_blocks = s["allocations"] - s["frees"]
    segments = s["upstream_allocations"] - s["upstream_releases"]
    out = {}
    for name in ("allocated_bytes", "active_bytes", "requested_bytes"):
        out[f"{name}.all.current"] = s["live_bytes"]
        out[f"{name}.all.peak"] = s["peak_live_bytes"]
    out["reserved_bytes.all.current"] = s["reserved_bytes"]
    out["reserved_bytes.all.peak"] = s["peak_reserved_bytes"]
    out["inactive_split_bytes.all.current"] = s["cached_bytes"]
    for name in ("allocation", "active"):
        out[f"{name}.all.current"] = live_blocks
        out[f"{name}.all.allocated"] = s["allocations"]
        out[f"{name}.all.freed"] = s["frees"]
    out["segment.all.current"] = segments
    out["segment.all.allocated"] = s["upstream_allocations"]
    out["segment.all.freed"] = s["upstream_releases"]
    out["num_alloc_retries"] = 0
    out["num_ooms"] = s["failed_allocations"]
    out["num_device_alloc"] = s["upstream_allocations"]
    out["num_device_free"] = s["upstream_releases"]
    for key, value in s.items():
        out["gpumem." + key] = value
    return collections.OrderedDict(sorted(out.items()))


def memory_stats_as_nested_dict(device=None) -> dict:
    """memory_stats() nested at its dots, as torch's function of that name."""
    nested: dict = {}
    for key, value in memory_stats(device).items():
        *path, last = key.split(".")
        node = nested
        for part in path:
            node = node.setdefault(part, {})
        node[last] = value
    return nested


def memory_allocated(device=None) -> int:
    """Bytes held by live tensors on `device` (gpumem's live_bytes)."""
    return stats(_index(device))["live_bytes"]


def max_memory_allocated(device=None) -> int:
    """The most memory_allocated() has been since the start or reset_peak_memory_stats()."""
    return stats(_index(device))["peak_live_bytes"]


def memory_reserved(device=None) -> int:
    """Bytes gpumem's pool holds from the driver on `device` (its reserved_bytes)."""
    return stats(_index(device))["reserved_bytes"]


def max_memory_reserved(device=None) -> int:
    """The most memory_reserved() has been since the start or reset_peak_memory_stats()."""
    return stats(_index(device))["peak_reserved_bytes"]


def reset_peak_memory_stats(device=None) -> None:
    """Peaks start again from the current figures (gpumem.reset_peaks)."""
    reset_peaks(_index(device))


def empty_cache() -> None:
    """Hands what every device's pool caches back to the driver (gpumem.trim on each)."""
    _lib.load().gpumem_trim_all()


def memory_summary(device=None, abbreviated: bool = False) -> str:
    """A short table of memory_stats() (torch's layout needs figures gpumem does not keep)."""
    del abbreviated
    s = memory_stats(device)
    mib = 1 << 20
    rows = [("allocated", s["allocated_bytes.all.current"], s["allocated_bytes.all.peak"]),
            ("reserved", s["reserved_bytes.all.current"], s["reserved_bytes.all.peak"])]
    lines = [f"gpumem memory summary, device {_index(device)}",
             f"{'':12}{'current MiB':>14}{'peak MiB':>14}"]
    lines += [f"{name:12}{cur / mib:14.1f}{peak / mib:14.1f}" for name, cur, peak in rows]
    lines.append(f"allocations {s['allocation.all.allocated']}, frees {s['allocation.all.freed']}, "
                 f"out of memory {s['num_ooms']}, device allocations {s['num_device_alloc']}")
    return "\n".join(lines) + "\n"


_REPLACEMENTS = {
    "memory_stats": memory_stats,
    "memory_stats_as_nested_dict": memory_stats_as_nested_dict,
    "memory_allocated": memory_allocated,
    "max_memory_allocated": max_memory_allocated,
    "memory_reserved": memory_reserved,
    "max_memory_reserved": max_memory_reserved,
    "memory_cached": memory_reserved,          # torch's deprecated names
    "max_memory_cached": max_memory_reserved,
    "reset_peak_memory_stats": reset_peak_memory_stats,
    "reset_max_memory_allocated": reset_peak_memory_stats,
    "reset_max_memory_cached": reset_peak_memory_stats,
    "empty_cache": empty_cache,
    "memory_summary": memory_summary,
}


def _patch_torch_cuda() -> None:
    """Points torch.cuda's functions (and torch.cuda.memory's, which torch's other functions call
    through) at the gpumem-backed ones above."""
    global patched
    done = []
    for name, fn in _REPLACEMENTS.items():
        for module in (_torch.cuda, _torch.cuda.memory):
            if hasattr(module, name):
                setattr(module, name, fn)
                if name not in done:
                    done.append(name)
    patched = tuple(done)
