"""Finding and loading libgpumem_torch.so (ctypes only). `pip install .` puts it inside this
package; a CMake build tree of the repository works too (PYTHONPATH=integrations/python)."""
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
    """$GPUMEM_LIB first (a file or a folder), then this package's folder (where the wheel installs
    the library), then the repository's CMake build folders (a source checkout)."""
    found: list[Path] = []
    env = os.environ.get("GPUMEM_LIB")
    if env:
        p = Path(env)
        found.append(p / LIB_NAME if p.is_dir() else p)
    here = Path(__file__).resolve().parent
    found.append(here / LIB_NAME)
    if len(here.parents) > 2 and (here.parents[2] / "integrations" / "python" / "gpumem").is_dir():
        root = here.parents[2]   # integrations/python/gpumem -> the repository root
        found += [root / "build" / "integrations" / LIB_NAME]
        found += sorted(root.glob("build*/integrations/" + LIB_NAME))
    return found


def _built_without_cuda() -> bool:
    try:
        from . import _build_info
    except ImportError:   # a source checkout: no build record
        return False
    return not _build_info.cuda


def library_path() -> str:
    """The .so that load() uses. Raises FileNotFoundError naming every place it looked (and saying
    so when this package was built where no CUDA toolkit was found)."""
    global _path
    if _path is not None:
        return _path
    tried = _candidates()
    for p in tried:
        if p.is_file():
            _path = str(p.resolve())
            return _path
    if os.environ.get("GPUMEM_LIB"):
        why = f"GPUMEM_LIB={os.environ['GPUMEM_LIB']} names no {LIB_NAME}"
    elif _built_without_cuda():
        why = (f"this gpumem package was built without its CUDA layer (no CUDA 13 toolkit was found "
               f"at install time), so it has no {LIB_NAME}: reinstall it where nvcc is found "
               "(PATH or /usr/local/cuda), or set GPUMEM_LIB to a built one")
    else:
        why = f"{LIB_NAME} not found; build it with CMake (target gpumem_torch) or set GPUMEM_LIB"
    raise FileNotFoundError(why + ". Looked in: " + ", ".join(str(p) for p in tried))


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


def _format(key: str, value) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    text = str(value)
    if any(c in text for c in ",;"):
        raise ValueError(f"gpumem.configure: bad value {text!r} for key {key!r}: no ',' or ';' in a value")
    return text


def configure(options: dict | None = None, /, **keywords) -> None:
    """Pool options for the pools not yet created, as a dict or keywords: the fields of
    gpumem::pool_options (docs/options.md), `upstream` (vmm|device|async) and
    `trace` (a file path), on top of GPUMEM_CONFIG; a None value is left out. Options not given keep
    the library's defaults. Raises ValueError naming the first unknown key or bad value (here or in
    GPUMEM_CONFIG), RuntimeError when a pool already exists (options are then fixed)."""
    merged = dict(options or {}, **keywords)
    for key in merged:
        if not isinstance(key, str) or not key or any(c in key for c in "=:,;"):
            raise ValueError(f"gpumem.configure: bad key {key!r}")
    text = ",".join(f"{k}={_format(k, v)}" for k, v in merged.items() if v is not None)
    rc = load().gpumem_configure(text.encode())
    if rc == -1 and not text:
        return   # nothing asked, and the pools exist already: nothing to refuse
    if rc == -2:
        raise ValueError(last_error() or "gpumem_configure refused the options")
    if rc != 0:
        raise RuntimeError(last_error() or f"gpumem_configure failed ({rc})")
