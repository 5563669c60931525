"""gpumem.torch.use() without a GPU or PyTorch: a stand-in `torch` module with the parts use()
touches (CUDAPluggableAllocator, change_current_allocator, torch.cuda's memory functions raising
as they do for a pluggable allocator) and the real libgpumem_torch.so ($GPUMEM_LIB). Checks that a
bad option raises ValueError before anything is swapped, and that afterwards torch.cuda's memory
functions answer from gpumem (zeros: no pool exists without a GPU) with PyTorch's keys.

    GPUMEM_LIB=build/integrations/libgpumem_torch.so PYTHONPATH=integrations/python \\
        python3 -m unittest tests/python/test_torch_patch.py
"""
import sys
import types
import unittest

NAMES = ("memory_stats", "memory_stats_as_nested_dict", "memory_allocated", "max_memory_allocated",
         "memory_reserved", "max_memory_reserved", "reset_peak_memory_stats", "empty_cache",
         "memory_summary")


def _unsupported(*_args, **_kwargs):
    raise RuntimeError("CUDAPluggableAllocator does not yet support getDeviceStats")


class _Device:
    """torch.device's shape: type and index, from "cuda:1" or ("cuda", 1)."""

    def __init__(self, kind, index=None):
        if ":" in kind:
            kind, index = kind.split(":")
        self.type, self.index = kind, None if index is None else int(index)


class _Raw:
    def __init__(self):
        self.hooks = {}

    def set_record_stream_fn(self, address):
        self.hooks["record_stream"] = address

    def set_reset_fn(self, address):
        self.hooks["reset"] = address

    def set_begin_allocate_to_pool(self, address):
        self.hooks["begin_allocate_to_pool"] = address

    def set_end_allocate_to_pool_fn(self, address):
        self.hooks["end_allocate_to_pool"] = address

    def set_release_pool(self, address):
        self.hooks["release_pool"] = address


class _Pluggable:
    def __init__(self, path, alloc_fn, free_fn):
        self.path, self.alloc_fn, self.free_fn, self.raw = path, alloc_fn, free_fn, _Raw()

    def allocator(self):
        return self.raw


def _fake_torch():
    torch = types.ModuleType("torch")
    cuda = types.ModuleType("torch.cuda")
    memory = types.ModuleType("torch.cuda.memory")
    torch.device, torch.cuda, cuda.memory = _Device, cuda, memory
    memory.CUDAPluggableAllocator = _Pluggable
    memory.current = None

    def change_current_allocator(alloc):
        memory.current = alloc

    memory.change_current_allocator = change_current_allocator
    cuda.current_device = lambda: 0
    for name in NAMES:
        setattr(cuda, name, _unsupported)
        setattr(memory, name, _unsupported)
    return torch


sys.modules["torch"] = _fake_torch()
import torch  # noqa: E402  (the stand-in)

import gpumem  # noqa: E402
import gpumem.torch  # noqa: E402


class TorchPatchTest(unittest.TestCase):
    def test_use(self):
        # A bad key is refused by name before PyTorch's allocator is touched.
        with self.assertRaisesRegex(ValueError, "unknown key 'bogus'"):
            gpumem.torch.use(bogus=1)
        with self.assertRaisesRegex(ValueError, "bad value 'x' for key 'max_reserved_bytes'"):
            gpumem.torch.use(max_reserved_bytes="x")
        with self.assertRaisesRegex(ValueError, "unknown key 'idle_budget'"):
            gpumem.torch.use(idle_budget=0.05)   # the pool policy's, not an option
        self.assertIsNone(torch.cuda.memory.current)
        self.assertIs(torch.cuda.memory_allocated, _unsupported)

        alloc = gpumem.torch.use(max_reserved_bytes="8G")
        self.assertIs(torch.cuda.memory.current, alloc)
        self.assertEqual(alloc.path, gpumem.library_path())
        self.assertEqual((alloc.alloc_fn, alloc.free_fn), ("gpumem_alloc", "gpumem_free"))
        self.assertEqual(gpumem.torch.hooks, {"record_stream": True, "empty_cache": True, "graph_pool_begin": True,
                                              "graph_pool_end": True, "graph_pool_release": True})
        self.assertEqual(len(set(alloc.raw.hooks.values())), 5, "each hook its own function")
        self.assertTrue(all(alloc.raw.hooks.values()))
        for name in NAMES:
            self.assertIs(getattr(torch.cuda, name), getattr(gpumem.torch, name), name)
            self.assertIs(getattr(torch.cuda.memory, name), getattr(gpumem.torch, name), name)
        self.assertEqual(set(NAMES) - set(gpumem.torch.patched), set())

        # No GPU, no pool: every figure is gpumem's zero, through every spelling of the device.
        for device in (None, 0, "cuda", "cuda:0", torch.device("cuda", 0)):
            self.assertEqual(torch.cuda.memory_allocated(device), 0)
            self.assertEqual(torch.cuda.max_memory_allocated(device), 0)
            self.assertEqual(torch.cuda.memory_reserved(device), 0)
            self.assertEqual(torch.cuda.max_memory_reserved(device), 0)
        with self.assertRaisesRegex(ValueError, "not a CUDA device"):
            torch.cuda.memory_allocated("cpu")
        stats = torch.cuda.memory_stats()
        for key in ("allocated_bytes.all.current", "allocated_bytes.all.peak", "reserved_bytes.all.current",
                    "reserved_bytes.all.peak", "requested_bytes.all.current", "allocation.all.current",
                    "segment.all.current", "num_alloc_retries", "num_ooms", "num_device_alloc",
                    "gpumem.live_bytes", "gpumem.largest_free_block_bytes"):
            self.assertEqual(stats.get(key), 0, key)
        self.assertEqual(list(stats), sorted(stats))
        nested = torch.cuda.memory_stats_as_nested_dict()
        self.assertEqual(nested["allocated_bytes"]["all"]["peak"], 0)
        self.assertEqual(nested["gpumem"]["reserved_bytes"], 0)
        self.assertIn("reserved", torch.cuda.memory_summary())
        torch.cuda.reset_peak_memory_stats()
        torch.cuda.empty_cache()

        # Options are fixed once in use; a second plain use() is a no-op.
        self.assertIs(gpumem.torch.use(), alloc)
        with self.assertRaises(RuntimeError):
            gpumem.torch.use(max_reserved_bytes="4G")


if __name__ == "__main__":
    unittest.main()
