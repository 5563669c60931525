#!/usr/bin/env python3
"""Quick GPU check of gpumem as CuPy's allocator: arrays on the default stream and on a stream of
their own, results against NumPy, gpumem.stats() following live memory, a zero-size array, trim,
and an allocation larger than the device that must raise CuPy's OutOfMemoryError with gpumem's
report (reserved, live, largest free block, advice) in its message.
    PYTHONPATH=integrations/python GPUMEM_LIB=build/integrations python3 integrations/smoke_cupy.py
Exit 0 when every check passed; prints one line per check."""
import numpy as np

import gpumem
import gpumem.cupy

gpumem.cupy.use()   # before any CuPy allocation

import cupy as cp  # noqa: E402
from smoke_checks import check, finish  # noqa: E402

print("cupy", cp.__version__, "device", cp.cuda.runtime.getDeviceProperties(0)["name"].decode())

before = gpumem.stats()["live_bytes"]
rng = np.random.default_rng(3)
host = rng.standard_normal((512, 384)).astype(np.float32)
a = cp.asarray(host)
b = a @ a.T
live = gpumem.stats()["live_bytes"]
check("stats count live bytes", live >= before + a.nbytes + b.nbytes, f"{live} vs {before} + {a.nbytes + b.nbytes}")
check("matmul equals NumPy's", np.allclose(cp.asnumpy(b), host @ host.T, rtol=1e-3, atol=1e-2))
check("CuPy's own pool stays empty", cp.get_default_memory_pool().total_bytes() == 0,
      str(cp.get_default_memory_pool().total_bytes()))

s = cp.cuda.Stream(non_blocking=True)
with s:
    c = cp.arange(1 << 20, dtype=cp.int64)
    total = int(c.sum())
s.synchronize()
check("array on a stream of its own", total == (1 << 20) * ((1 << 20) - 1) // 2, str(total))
del c
s.synchronize()

z = cp.empty(0, dtype=cp.float32)
check("zero-size array", z.size == 0)

del a, b
cp.cuda.Device().synchronize()
after = gpumem.stats()["live_bytes"]
check("freed arrays leave live bytes", after <= before, f"{after} vs {before}")
held = gpumem.stats()["reserved_bytes"]
gpumem.trim()
st = gpumem.stats()
check("trim gives back what no array holds", st["reserved_bytes"] <= min(held, st["live_bytes"] + (32 << 20)),
      f"reserved {held} -> {st['reserved_bytes']}, live {st['live_bytes']}")

# 200 GiB: more than the device holds, but a plausible request, so the pool tries and reports —
# and holds no more memory afterwards than before (it once kept the whole device as spares).
reserved_before = gpumem.stats()["reserved_bytes"]
try:
    cp.empty(200 << 30, dtype=cp.uint8)
    check("an allocation larger than the device raises", False)
except cp.cuda.memory.OutOfMemoryError as e:
    check("an allocation larger than the device raises OutOfMemoryError with gpumem's report",
          "reserved" in str(e) and "largest free block" in str(e), str(e)[:200].replace("\n", " "))
except Exception as e:  # noqa: BLE001
    check("an allocation larger than the device raises OutOfMemoryError", False, f"{type(e).__name__}: {e}"[:200])
reserved_after = gpumem.stats()["reserved_bytes"]
check("the failed request left no memory reserved", reserved_after <= reserved_before,
      f"reserved {reserved_before} -> {reserved_after}")

x = cp.ones(1000, dtype=cp.float32)
check("allocation works after the failure", float(x.sum()) == 1000.0)

finish()
