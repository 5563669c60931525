"""gpumem as PyTorch's CUDA allocator.

    import gpumem.torch
    gpumem.torch.use()          # first thing: before any CUDA tensor exists

Through torch.cuda.memory.CUDAPluggableAllocator. What that interface leaves out, and the gpumem
call that stands in (see the README, "PyTorch and CuPy"):
  torch.cuda.memory_stats / max_memory_allocated / reset_peak_memory_stats raise for a pluggable
  allocator ("does not yet support getDeviceStats")  -> gpumem.stats(), gpumem.reset_peaks()
  torch.cuda.empty_cache() reaches it only through a reset hook  -> wired here when this torch
  exposes set_reset_fn; gpumem.trim() always works
  Tensor.record_stream reaches it only through a record-stream hook -> wired here when this torch
  exposes set_record_stream_fn; gpumem.record_stream() always works
"""
from __future__ import annotations

import torch as _torch

from . import _lib

_allocator = None   # kept alive: PyTorch holds only the C++ side
hooks: dict = {}    # which optional hooks this torch accepted: {"record_stream": bool, "empty_cache": bool}


def use(**options):
    """Makes gpumem PyTorch's CUDA allocator, with gpumem::pool_options given as keywords
    (release_threshold_bytes=..., max_reserved_bytes=..., idle_budget=..., reserve_ceiling=...,
    initial_reserve_bytes="8G" to reserve the job's memory up front, front_cache=False,
    upstream="vmm", ...). idle_budget defaults to 0.05 here (the library's
    default is 0, the tightest): a job whose shapes change from step to step then stops remapping
    memory on every step, for up to 5% of live memory kept idle; idle_budget=0 asks for the
    tightest reserve, and reserve_ceiling=1.03 keeps the budget's savings only while peak
    reserved stays within 1.03x peak live; with front_cache_bytes=0 as well, large freed blocks go
    straight back to the pool, the tightest reserve measured (README, "The tightest reserve").
    Must run before the first CUDA allocation: PyTorch refuses to swap an allocator in use.
    Calling it again after success is a no-op (and options must then be empty)."""
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
    for hook, setter, fn in (("record_stream", "set_record_stream_fn", "gpumem_record_stream"),
                             ("empty_cache", "set_reset_fn", "gpumem_trim_all")):
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
    return alloc


def in_use() -> bool:
    return _allocator is not None
