"""Finding and loading libgpumem_torch.so (ctypes only; no build step beyond CMake)."""
from __future__ import annotations

import ctypes
import os
import threading
from pathlib import Path

LIB_NAME = "libgpumem_torch.so"

_lock = threading.Lock()
_lib: ctypes.CDLL | None = None
_path: str | None = None


def _candidates() -> list[Path]:
    found: list[Path] = []
    env = os.environ.get("GPUMEM_LIB")
    if env:
        p = Path(env)
        found.append(p / LIB_NAME if p.is_dir() else p)
    here = Path(__file__).resolve().parent
    found += [here / LIB_NAME, here.parent / LIB_NAME]
    # integrations/python/gpumem -> the repository root, then its CMake build folders.
    root = here.parents[2]
    found += [root / "build" / "integrations" / LIB_NAME, root / "build" / LIB_NAME]
    found += sorted(root.glob("build*/integrations/" + LIB_NAME))
    return found


def library_path() -> str:
    """The .so that load() uses: $GPUMEM_LIB (a file or a folder), next to the package, or the
    repository's CMake build folder. Raises FileNotFoundError naming every place it looked."""
    global _path
    if _path is not None:
        return _path
    tried = _candidates()
    for p in tried:
        if p.is_file():
            _path = str(p.resolve())
            return _path
    raise FileNotFoundError(
        f"{LIB_NAME} not found; build it with CMake (target gpumem_torch) or set GPUMEM_LIB. "
        "Looked in: " + ", ".join(str(p) for p in tried))


def load() -> ctypes.CDLL:
    """The loaded library, with argument types declared. PyTorch's CUDAPluggableAllocator opens
    the same path again; the dynamic loader hands back the same copy, so both see the same pools."""
    global _lib
    with _lock:
        if _lib is not None:
            return _lib
        lib = ctypes.CDLL(library_path())
        vp, sz, i, ssz = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_ssize_t
        lib.gpumem_alloc_nothrow.argtypes = [ssz, i, vp]
        lib.gpumem_alloc_nothrow.restype = vp
        lib.gpumem_free.argtypes = [vp, ssz, i, vp]
        lib.gpumem_free.restype = None
        lib.gpumem_configure.argtypes = [ctypes.c_char_p]
        lib.gpumem_configure.restype = i
        lib.gpumem_stats.argtypes = [i, ctypes.POINTER(sz)]
        lib.gpumem_stats.restype = i
        lib.gpumem_stats_ex.argtypes = [i, ctypes.POINTER(ctypes.c_uint64), i]
        lib.gpumem_stats_ex.restype = i
        lib.gpumem_trim.argtypes = [i]
        lib.gpumem_trim.restype = i
        lib.gpumem_trim_all.argtypes = []
        lib.gpumem_trim_all.restype = None
        lib.gpumem_settle.argtypes = [i]
        lib.gpumem_settle.restype = i
        lib.gpumem_record_stream.argtypes = [vp, vp]
        lib.gpumem_record_stream.restype = None
        lib.gpumem_reset_peaks.argtypes = [i]
        lib.gpumem_reset_peaks.restype = i
        lib.gpumem_flush_trace.argtypes = []
        lib.gpumem_flush_trace.restype = i
        lib.gpumem_last_error.argtypes = []
        lib.gpumem_last_error.restype = ctypes.c_char_p
        _lib = lib
        return lib


def last_error() -> str:
    return (load().gpumem_last_error() or b"").decode(errors="replace")


def function_address(name: str) -> int:
    """A C entry point's address, for PyTorch's set_*_fn hooks."""
    return ctypes.cast(getattr(load(), name), ctypes.c_void_p).value


def _format(value) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    return str(value)


def configure(options: dict) -> None:
    """Pool options for the pools not yet created (keys of gpumem::pool_options, plus `upstream`:
    vmm|device|async). Raises RuntimeError when a pool already exists or an option is wrong."""
    text = ",".join(f"{k}={_format(v)}" for k, v in options.items() if v is not None)
    rc = load().gpumem_configure(text.encode())
    if rc != 0:
        raise RuntimeError(last_error() or f"gpumem_configure failed ({rc})")
