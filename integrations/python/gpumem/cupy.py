"""gpumem as CuPy's device allocator.

    import gpumem.cupy
    gpumem.cupy.use()

Every CuPy allocation then comes from gpumem's pool for the current device, on the current
stream. CuPy's own MemoryPool is bypassed (cupy.get_default_memory_pool() stays empty).
"""
from __future__ import annotations

import cupy as _cupy

from . import _lib


# Bound once by use(): each allocation and free would otherwise look these up through several
# module attributes, and the per-call wrappers (ctypes.c_void_p) are not needed once the library's
# argtypes are declared. CuPy calls _malloc from Cython for every array, so what it costs is what
# every CuPy array pays on top of the pool itself.
_alloc = _free = None
_get_device = _cupy.cuda.runtime.getDevice
_current_stream = _cupy.cuda.get_current_stream
_Unowned = _cupy.cuda.UnownedMemory
_Pointer = _cupy.cuda.MemoryPointer


class _Block:
    """Owner of one gpumem allocation; frees it when CuPy drops the last reference.

    The free is ordered after the work on the stream current *at free time*, which is always a
    live stream. As with CuPy's own pool, memory released while another stream still works on it
    needs that stream synchronized first (or gpumem.record_stream(array, stream))."""

    __slots__ = ("ptr", "size", "device", "__weakref__")

    def __init__(self, ptr: int, size: int, device: int):
        self.ptr, self.size, self.device = ptr, size, device

    def __del__(self):
        free = _free
        if free is None or _lib._lib is None or not self.ptr:
            return
        try:
            stream = _current_stream(self.device).ptr
        except Exception:   # interpreter shutdown: CuPy may be half torn down
            stream = 0
        free(self.ptr, self.size, self.device, stream)
        self.ptr = 0


def _malloc(size: int):
    if size == 0:
        return _Pointer(_cupy.cuda.memory.Memory(0), 0)
    device = _get_device()
    ptr = _alloc(size, device, _current_stream().ptr)
    if not ptr:
        message = _lib.last_error()
        try:
            err = _cupy.cuda.memory.OutOfMemoryError(size, 0)
            err.args = (message,)   # gpumem's report: reserved, live, largest free block, advice
        except Exception:
            err = MemoryError(message)
        raise err
    return _Pointer(_Unowned(ptr, size, _Block(ptr, size, device), device), 0)


_in_use = False


def use(**options) -> None:
    """Makes gpumem CuPy's allocator (cupy.cuda.set_allocator), with pool options as keywords on
    top of GPUMEM_CONFIG (the keys of gpumem.torch.use; an option given nowhere keeps the library's
    default; an unknown key or bad value raises ValueError naming it). Options only count before
    gpumem's first allocation on a device."""
    global _in_use, _alloc, _free
    lib = _lib.load()
    _alloc, _free = lib.gpumem_alloc_nothrow, lib.gpumem_free
    if options or not _in_use:
        _lib.configure(options)   # also reports a bad GPUMEM_CONFIG here rather than at first use
    _cupy.cuda.set_allocator(_malloc)
    _in_use = True


def in_use() -> bool:
    return _in_use
