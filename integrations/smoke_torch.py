#!/usr/bin/env python3
"""Quick GPU check of gpumem as PyTorch's allocator: tensors on two streams, record_stream,
stats, trim, an OOM that must raise (in a child process), a small model forward.
    PYTHONPATH=integrations/python GPUMEM_LIB=build/integrations python3 integrations/smoke_torch.py
Exit 0 when every check passed; prints one line per check."""
import os
import subprocess
import sys

import gpumem
import gpumem.torch

gpumem.torch.use()   # before any CUDA allocation

import torch  # noqa: E402
from smoke_checks import check, finish  # noqa: E402

print("torch", torch.__version__, "device", torch.cuda.get_device_name(0), "hooks", gpumem.torch.hooks)

s1, s2 = torch.cuda.Stream(), torch.cuda.Stream()
with torch.cuda.stream(s1):
    a = torch.randn(1024, 1024, device="cuda")
    b = a @ a
with torch.cuda.stream(s2):
    c = torch.ones(4096, 256, device="cuda") * 2
st = gpumem.stats()
check("stats count live bytes", st["live_bytes"] >= a.nbytes + b.nbytes + c.nbytes, str(st))

# b produced on s1, consumed on s2: record it, free it, allocate again on s1.
s2.wait_stream(s1)
with torch.cuda.stream(s2):
    d = b.sum()
gpumem.record_stream(b, s2)
b.record_stream(s2)      # reaches gpumem only when the record_stream hook is wired
del b
with torch.cuda.stream(s1):
    e = torch.zeros(1024, 1024, device="cuda")
torch.cuda.synchronize()
ref = (a @ a).sum()
check("record_stream result", torch.allclose(d, ref, rtol=1e-3, atol=1e-2), f"{d.item():.4f} vs {ref.item():.4f}")
check("zeros after reuse", e.abs().sum().item() == 0)

try:
    gpumem.record_stream(12345, s1)
    check("record_stream of a foreign pointer raises", False)
except RuntimeError:
    check("record_stream of a foreign pointer raises", True)

empty = torch.empty(0, device="cuda")
check("zero-size tensor", empty.numel() == 0)

del a, c, d, e
torch.cuda.synchronize()
held = gpumem.stats()["reserved_bytes"]
gpumem.settle()
check("settle keeps the memory", gpumem.stats()["reserved_bytes"] == held)
f = torch.ones(1 << 20, device="cuda")
check("allocation after settle", f.sum().item() == float(1 << 20))
del f
torch.cuda.synchronize()
before = gpumem.stats()["reserved_bytes"]
gpumem.trim()
after = gpumem.stats()["reserved_bytes"]
check("trim gives memory back", after <= before, f"{before} -> {after}")
torch.cuda.empty_cache()   # gpumem_trim_all when the reset hook is wired; never an error

try:
    torch.cuda.max_memory_allocated()
    check("note: torch.cuda.max_memory_allocated works with a pluggable allocator", True)
except RuntimeError as ex:
    print("note: torch.cuda.max_memory_allocated raises:", str(ex).splitlines()[0])

model = torch.nn.Sequential(torch.nn.Linear(512, 1024), torch.nn.GELU(), torch.nn.Linear(1024, 10)).cuda()
with torch.no_grad():
    out = model(torch.randn(64, 512, device="cuda"))
torch.cuda.synchronize()
check("model forward", out.shape == (64, 10) and torch.isfinite(out).all().item())
gpumem.reset_peaks()
st = gpumem.stats()
check("reset_peaks", st["peak_live_bytes"] == st["live_bytes"], str(st))

# Out of memory: PyTorch must raise (RuntimeError / OutOfMemoryError), not crash. In a child so a
# crash is reported instead of taking the smoke test down.
child = r'''
import gpumem.torch, sys
gpumem.torch.use(max_reserved_bytes=1 << 30)
import torch
try:
    x = torch.empty(2 << 30, dtype=torch.uint8, device="cuda")
    print("NO-RAISE")
except Exception as e:
    print("RAISED", type(e).__name__, str(e).splitlines()[0][:160])
y = torch.ones(10, device="cuda")   # the process is still usable
print("AFTER", int(y.sum().item()))
'''
r = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, timeout=120,
                   env=dict(os.environ))
print(r.stdout.strip(), r.stderr.strip()[-400:])
check("OOM raises a Python exception", "RAISED" in r.stdout and "AFTER 10" in r.stdout, f"rc={r.returncode}")

# trace=PATH records every request as a trace `gpumem replay` reads: rows written on
# flush_trace() and the rest at exit; every free names a pointer allocated before it.
import tempfile  # noqa: E402
trace_dir = tempfile.mkdtemp()
child = r'''
import gpumem, gpumem.torch, os, sys
gpumem.torch.use(trace=sys.argv[1])
import torch
x = torch.empty(1 << 20, device="cuda"); y = torch.empty(3000, device="cuda"); del x
torch.cuda.synchronize()
gpumem.flush_trace()
del y   # written at exit
print("PID", os.getpid())
'''
r = subprocess.run([sys.executable, "-c", child, os.path.join(trace_dir, "smoke-{pid}.csv")], capture_output=True,
                   text=True, timeout=120, env=dict(os.environ))
rows, live, bad = [], set(), 0
try:
    pid = r.stdout.split("PID")[1].strip()
    with open(os.path.join(trace_dir, f"smoke-{pid}.csv")) as f:
        rows = [line.strip().split(",") for line in f][1:]
except (IndexError, OSError) as ex:
    print("trace:", ex, r.stderr.strip()[-400:])
for row in rows:
    if row[2] == "allocate":
        live.add(row[3])
    elif row[2] == "free":
        bad += row[3] not in live
        live.discard(row[3])
check("trace records every request", len(rows) >= 4 and bad == 0 and not live,
      f"{len(rows)} rows, {bad} frees of unknown pointers, {len(live)} left live")

# GPUMEM_CONFIG (keys from the pool option table): an initial reserve is real memory before the
# first tensor; a bad value stops use() with a ValueError naming the key and value.
child = r'''
import gpumem, gpumem.torch
try:
    gpumem.torch.use()
except ValueError as e:
    print("REFUSED", e)
    raise SystemExit(0)
import torch
x = torch.empty(1024, device="cuda")
print("RESERVED", gpumem.stats()["reserved_bytes"])
'''
good = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, timeout=120,
                      env=dict(os.environ, GPUMEM_CONFIG="initial_reserve=256M,max_reserved=8G"))
bad = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, timeout=120,
                     env=dict(os.environ, GPUMEM_CONFIG="initial_reserve=lots"))
print(good.stdout.strip(), good.stderr.strip()[-300:], "|", bad.stdout.strip(), bad.stderr.strip()[-300:])
try:
    reserved = int(good.stdout.split("RESERVED")[1].split()[0])
except (IndexError, ValueError):
    reserved = -1
check("GPUMEM_CONFIG initial_reserve is reserved before use", reserved >= 256 << 20, good.stdout.strip())
check("GPUMEM_CONFIG bad value stops use() naming it",
      "REFUSED GPUMEM_CONFIG: bad value 'lots' for key 'initial_reserve'" in bad.stdout, bad.stdout.strip())

finish()
