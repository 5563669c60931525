"""gpumem as CuPy's device allocator.

    import gpumem.cupy
    gpumem.cupy.use()

Every CuPy allocation then comes from gpumem's pool for the current device, on the current
stream. CuPy's own MemoryPool is bypassed (cupy.get_default_memory_pool() stays empty).
"""
from __future__ import annotations

import ctypes

import cupy as _cupy

from . import _lib


class _Block:
    """Owner of one gpumem allocation; frees it when CuPy drops the last reference.

    The free is ordered after the work on the stream current *at free time*, which is always a
    live stream. As with CuPy's own pool, memory released while another stream still works on it
    needs that stream synchronized first (or gpumem.record_stream(array, stream))."""

    __slots__ = ("ptr", "size", "device", "__weakref__")

    def __init__(self, ptr: int, size: int, device: int):
        self.ptr, self.size, self.device = ptr, size, device

    def __del__(self):
        lib = _lib._lib
        if lib is None or not self.ptr:
            return
        try:
            stream = _cupy.cuda.get_current_stream(self.device).ptr
        except Exception:   # interpreter shutdown: CuPy may be half torn down
            stream = 0
        lib.gpumem_free(ctypes.c_void_p(self.ptr), self.size, self.device, ctypes.c_void_p(stream))
        self.ptr = 0


def _malloc(size: int):
    if size == 0:
        return _cupy.cuda.MemoryPointer(_cupy.cuda.memory.Memory(0), 0)
    lib = _lib._lib
    device = _cupy.cuda.runtime.getDevice()
    stream = _cupy.cuda.get_current_stream().ptr
    ptr = lib.gpumem_alloc_nothrow(size, device, ctypes.c_void_p(stream))
    if not ptr:
        message = _lib.last_error()
        try:
            err = _cupy.cuda.memory.OutOfMemoryError(size, 0)
            err.args = (message,)   # gpumem's report: reserved, live, largest free block, advice
        except Exception:
            err = MemoryError(message)
        raise err
    owner = _Block(ptr, size, device)
    mem = _cupy.cuda.UnownedMemory(ptr, size, owner, device)
    return _cupy.cuda.MemoryPointer(mem, 0)


_in_use = False


def use(**options) -> None:
    """Makes gpumem CuPy's allocator (cupy.cuda.set_allocator), with gpumem::pool_options as
    keywords (idle_budget defaults to 0.05 here, as for PyTorch; see gpumem.torch.use). Options
    only count before gpumem's first allocation on a device."""
    global _in_use
    _lib.load()
    if options:
        _lib.configure(options)
    _cupy.cuda.set_allocator(_malloc)
    _in_use = True


def in_use() -> bool:
    return _in_use
