"""gpumem from Python: PyTorch and CuPy allocators over libgpumem_torch.so (ctypes).

    import gpumem.torch; gpumem.torch.use()      # before the first CUDA allocation
    import gpumem.cupy;  gpumem.cupy.use()

and, whichever framework allocates:

    gpumem.stats()            # live / reserved bytes and their peaks, allocation counts
    gpumem.trim()             # hand cached memory back to the driver
    gpumem.settle()           # where a step ends: cached blocks back to the pool, none to the driver
    gpumem.record_stream(x, s)  # x is also used on stream s (Tensor.record_stream's meaning)
    gpumem.reset_peaks()
    gpumem.flush_trace()      # with use(trace="job-{pid}.csv"): write the recorded requests out now

Options: the keywords of use() / configure(), on top of the environment variable GPUMEM_CONFIG
("key=value,..."); both take the same keys, and an option given in neither keeps the library's
default. An unknown key or a bad value raises ValueError naming it.
"""
from __future__ import annotations

import ctypes
import re
from pathlib import Path

from . import _lib
from ._lib import configure, last_error, library_path


def _version() -> str:
    """The project's version: CMake's project(VERSION), recorded at install time; in a source
    checkout, read from the repository's CMakeLists.txt."""
    try:
        from ._build_info import version
        return version
    except ImportError:
        pass
    top = Path(__file__).resolve().parents[3] / "CMakeLists.txt"
    try:
        m = re.search(r"project\(gpumem\s+VERSION\s+([0-9][0-9.]*)", top.read_text())
    except OSError:
        m = None
    return m.group(1) if m else "0+unknown"


__version__ = _version()

__all__ = ["__version__", "configure", "last_error", "library_path", "stats", "trim", "settle",
           "record_stream", "reset_peaks", "flush_trace"]

_STAT_KEYS = ("live_bytes", "peak_live_bytes", "reserved_bytes", "peak_reserved_bytes",
              "allocations", "frees", "upstream_allocations", "granules_mapped", "granules_unmapped",
              "map_calls", "unmap_calls", "events_recorded", "front_hits", "failed_allocations",
              "remap_ns", "remaps_deferred", "stream_ordered_moves", "driver_granules_mapped",
              "driver_granules_unmapped", "upstream_releases", "cached_bytes",
              "largest_free_block_bytes")


def _device(device) -> int:
    if device is None:
        return -1   # the calling thread's current device
    if isinstance(device, str):    # "cuda", "cuda:1", "1"
        kind, _, index = device.rpartition(":") if ":" in device else ("", "", device)
        if kind not in ("", "cuda") or not (index.isdigit() or index == "cuda"):
            raise ValueError(f"gpumem: not a CUDA device: {device!r}")
        return -1 if index == "cuda" else int(index)
    if hasattr(device, "index"):   # torch.device
        if getattr(device, "type", "cuda") != "cuda":
            raise ValueError(f"gpumem: not a CUDA device: {device}")
        return -1 if device.index is None else int(device.index)
    if hasattr(device, "id"):      # cupy.cuda.Device
        return int(device.id)
    return int(device)


def stats(device=None) -> dict:
    """The pool's figures for `device` (default: current): live_bytes, peak_live_bytes,
    reserved_bytes, peak_reserved_bytes, allocations, frees; and what its slow path did:
    upstream_allocations, granules_mapped / granules_unmapped and the map_calls / unmap_calls that
    did it (each granule costs tens of µs on a GPU), events_recorded, front_hits (requests served
    without the pool's lock), failed_allocations; remap_ns (host time charged for moving granules)
    and remaps_deferred (moves turned down), zeros unless the policy bounds that time; stream_ordered_moves
    (granules a stream's request took from memory that stream freed while its work was still
    queued); driver_granules_mapped / driver_granules_unmapped (what the driver really did: a
    granule moved back where it was still mapped costs no call); upstream_releases (what went back
    to the upstream), cached_bytes (reserved less live and its rounding) and
    largest_free_block_bytes. Zeros before the first allocation."""
    out = (ctypes.c_uint64 * len(_STAT_KEYS))()
    got = _lib.load().gpumem_stats_ex(_device(device), out, len(_STAT_KEYS))
    if got < 0:
        raise RuntimeError(last_error())
    return dict(zip(_STAT_KEYS[:got], (int(v) for v in out)))


def trim(device=None) -> None:
    """Hands every cached byte of `device`'s pool (default: current) back to the driver; waits
    for pending frees first. What torch.cuda.empty_cache() does for PyTorch's own allocator."""
    if _lib.load().gpumem_trim(_device(device)) != 0:
        raise RuntimeError(last_error())


def settle(device=None) -> None:
    """Gives what `device`'s pool (default: current) caches back to the pool's own free memory —
    nothing to the driver, no wait. Call it where a training step or an inference batch ends: the
    next step then lands where the first one did, on memory already mapped, instead of growing
    around blocks the caches kept (pool::settle in include/gpumem/pool.hpp)."""
    if _lib.load().gpumem_settle(_device(device)) != 0:
        raise RuntimeError(last_error())


def reset_peaks(device=None) -> None:
    """Peaks start again from the current figures."""
    if _lib.load().gpumem_reset_peaks(_device(device)) != 0:
        raise RuntimeError(last_error())


def flush_trace() -> None:
    """Writes out the requests recorded so far (the pool option trace=PATH records every request
    in RMM's log CSV, which `gpumem replay`, `doctor` and `report` read; the rest is written at
    exit)."""
    if _lib.load().gpumem_flush_trace() != 0:
        raise RuntimeError(last_error())


def _pointer(obj) -> int:
    if isinstance(obj, int):
        return obj
    if hasattr(obj, "untyped_storage"):   # torch.Tensor: the allocation, not a view's offset
        return int(obj.untyped_storage().data_ptr())
    data = getattr(obj, "data", None)      # cupy.ndarray -> MemoryPointer -> its memory
    mem = getattr(data, "mem", None)
    if mem is not None:
        return int(mem.ptr)
    raise TypeError(f"gpumem.record_stream: cannot find the allocation of {type(obj).__name__}")


def _stream(s) -> int:
    if s is None:
        return 0
    if isinstance(s, int):
        return s
    for attr in ("cuda_stream", "ptr"):   # torch.cuda.Stream, cupy.cuda.Stream
        if hasattr(s, attr):
            return int(getattr(s, attr))
    raise TypeError(f"gpumem.record_stream: not a stream: {type(s).__name__}")


def record_stream(obj, stream) -> None:
    """`obj` (a torch.Tensor, a cupy.ndarray or a raw pointer from gpumem) is also used on
    `stream`: its memory is reused only after the work enqueued there before it is freed."""
    _lib.load().gpumem_record_stream(ctypes.c_void_p(_pointer(obj)), ctypes.c_void_p(_stream(stream)))
    err = last_error()
    if err.startswith("gpumem_record_stream"):
        raise RuntimeError(err)
