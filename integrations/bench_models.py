#!/usr/bin/env python3
"""gpumem vs PyTorch's (and CuPy's) own caching allocator on real models: the integration test
and benchmark for the GPU machine. No network, no downloads: models are built from configs with
random weights, inputs are random tokens / images with fixed seeds.

Each (model, allocator) runs in a fresh subprocess (an allocator can only be chosen before the
first CUDA allocation). The child times every step (torch.cuda.synchronize() around it), records
peak allocated / peak reserved bytes and every step's loss / output checksum to a JSON file; the
parent prints one JSON line per run, compares the two runs' outputs within tolerance, and ends
with a table of ratios.

    PYTHONPATH=integrations/python GPUMEM_LIB=build/integrations \
        python3 integrations/bench_models.py [--models resnet50_train,gpt2_train,...] [--steps N]

Models: resnet50_train, gpt2_train, bert_infer, llama_generate, cupy_ops.
--peers adds PyTorch allocators that are not gpumem, each compared with native like gpumem:
native-async (PyTorch's own cudaMallocAsync backend) and pluggable-async (the same cudaMallocAsync
behind CUDAPluggableAllocator, libgpumem_pluggable_probe.so): their difference is what the pluggable
interface itself costs a step, whatever allocator is behind it.
GPUMEM_TRACE_DIR=DIR: each gpumem run also records every request it served as a trace there
(DIR/<model>-<allocator>-<pid>.csv, RMM's log CSV), for `gpumem replay` / `doctor` without a GPU.
Exit status: 0 when every run finished and every comparison matched, 1 otherwise.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

from fresh_runs import PEERS, child_env, gpumem_options, use_torch_allocator, wants_settle

MODELS = ["resnet50_train", "gpt2_train", "bert_infer", "llama_generate", "cupy_ops"]
DEFAULT_STEPS = {"resnet50_train": 20, "gpt2_train": 20, "bert_infer": 40, "llama_generate": 16,
                 "cupy_ops": 200}
# Steps left out of the median: gpt2 and llama cycle through 10 and 8 shapes, so their first cycle
# is the warm-up (every shape seen once, by both allocators); the rest repeat nothing or everything.
WARM_STEPS = {"resnet50_train": 3, "gpt2_train": 10, "bert_infer": 5, "llama_generate": 8, "cupy_ops": 3}
# Relative tolerance when comparing per-step outputs of the two allocators. Training runs use
# atomics in backward kernels, so the same seeds give close, not identical, losses.
RTOL = {"resnet50_train": 5e-2, "gpt2_train": 5e-2, "bert_infer": 1e-2, "llama_generate": 0.0,
        "cupy_ops": 1e-5}
CHILD_TIMEOUT_S = 120


# ------------------------------------------------------------------------------------------ child
# gpumem runs: granules the driver mapped + unmapped during each timed step (each costs tens of µs
# of driver time on a GPU), so a slow step can be told apart from a slow allocator.
STEP_GRANULES: list = []
_granule_probe = None
_settle = None  # gpumem.settle for a "settle=1" run: called where each step ends, outside its time


def _granules_now():
    s = _granule_probe()
    # What the driver did (a library older than kept mappings reports only the pool's moves).
    return (s.get("driver_granules_mapped", s["granules_mapped"]) +
            s.get("driver_granules_unmapped", s["granules_unmapped"]))


def _sync_time(torch, fn):
    torch.cuda.synchronize()
    g0 = _granules_now() if _granule_probe else 0
    t0 = time.perf_counter()
    out = fn()
    torch.cuda.synchronize()
    ms = (time.perf_counter() - t0) * 1e3
    if _granule_probe:
        STEP_GRANULES.append(_granules_now() - g0)
    if _settle:
        _settle()
    return ms, out


def _seed(torch, seed=1234):
    import random

    import numpy as np
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    torch.cuda.manual_seed_all(seed)
    # Same kernels in both runs; cudnn.benchmark would also call the pluggable allocator's
    # cacheInfo, which PyTorch does not support for pluggable allocators.
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.deterministic = True


RESNET_BATCH = int(os.environ.get("GPUMEM_RESNET_BATCH", "32"))


def run_resnet50_train(torch, steps):
    import torchvision
    _seed(torch)
    model = torchvision.models.resnet50(weights=None).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    gen = torch.Generator().manual_seed(7)
    times, values = [], []
    for _ in range(steps):
        x = torch.randn(RESNET_BATCH, 3, 224, 224, generator=gen).cuda(non_blocking=False)
        y = torch.randint(0, 1000, (RESNET_BATCH,), generator=gen).cuda()

        def step():
            opt.zero_grad(set_to_none=True)
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            return loss.detach()
        ms, loss = _sync_time(torch, step)
        times.append(ms)
        values.append(float(loss))
    return times, values


def run_gpt2_train(torch, steps):
    from transformers import GPT2Config, GPT2LMHeadModel
    _seed(torch)
    cfg = GPT2Config(n_layer=12, n_embd=768, n_head=12, n_positions=1024, vocab_size=50257,
                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    model = GPT2LMHeadModel(cfg).cuda().train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    gen = torch.Generator().manual_seed(11)
    seqs = [128, 512, 256, 1024, 384, 768, 192, 640, 896, 320]
    times, values = [], []
    for i in range(steps):
        seq = seqs[i % len(seqs)]
        ids = torch.randint(0, cfg.vocab_size, (8, seq), generator=gen).cuda()

        def step():
            opt.zero_grad(set_to_none=True)
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = model(input_ids=ids, labels=ids).loss
            loss.backward()
            opt.step()
            return loss.detach()
        ms, loss = _sync_time(torch, step)
        times.append(ms)
        values.append(float(loss))
    return times, values


def run_bert_infer(torch, steps):
    from transformers import BertConfig, BertModel
    _seed(torch)
    model = BertModel(BertConfig()).cuda().half().eval()
    gen = torch.Generator().manual_seed(13)
    times, values = [], []
    for _ in range(steps):
        batch = int(torch.randint(1, 65, (1,), generator=gen))
        seq = int(torch.randint(16, 513, (1,), generator=gen))
        ids = torch.randint(0, 30522, (batch, seq), generator=gen).cuda()
        mask = torch.ones_like(ids)

        def step():
            with torch.inference_mode():
                return model(input_ids=ids, attention_mask=mask).last_hidden_state.float().mean()
        ms, out = _sync_time(torch, step)
        times.append(ms)
        values.append(float(out))
    return times, values


def run_llama_generate(torch, steps):
    from transformers import LlamaConfig, LlamaForCausalLM
    _seed(torch)
    cfg = LlamaConfig(vocab_size=32000, hidden_size=512, intermediate_size=1408,
                      num_hidden_layers=8, num_attention_heads=8, num_key_value_heads=4,
                      max_position_embeddings=2048, pad_token_id=0, bos_token_id=1,
                      eos_token_id=2)
    model = LlamaForCausalLM(cfg).cuda().to(torch.bfloat16).eval()
    gen = torch.Generator().manual_seed(17)
    batches = [1, 8, 32, 4, 16, 2, 24, 12]
    times, values = [], []
    for i in range(steps):
        batch = batches[i % len(batches)]
        plen = int(torch.randint(16, 129, (1,), generator=gen))
        ids = torch.randint(3, cfg.vocab_size, (batch, plen), generator=gen).cuda()

        def step():
            with torch.inference_mode():
                return model.generate(input_ids=ids, attention_mask=torch.ones_like(ids),
                                      max_new_tokens=48, min_new_tokens=48, do_sample=False,
                                      pad_token_id=0)
        ms, out = _sync_time(torch, step)
        times.append(ms)
        values.append(int(out[:, plen:].to(torch.int64).sum()))   # exact: greedy tokens
    return times, values


def run_cupy_ops(cp, steps, stats_fn):
    """Varied-size FFT / matmul / elementwise work. stats_fn() -> (used, reserved) now."""
    rs = cp.random.RandomState(21)
    import numpy as np
    shapes = np.random.default_rng(5)
    times, values = [], []
    peak_used = peak_res = 0
    for _ in range(steps):
        n = int(shapes.integers(64, 2048))
        m = int(shapes.integers(64, 2048))
        cp.cuda.Device().synchronize()
        t0 = time.perf_counter()
        a = rs.standard_normal((n, m), dtype=cp.float32)
        b = rs.standard_normal((m, int(shapes.integers(32, 1024))), dtype=cp.float32)
        c = a @ b
        f = cp.fft.rfft(a, axis=1)
        e = cp.tanh(c) * 0.5 + cp.abs(f[:, : c.shape[1] // 2 + 1]).mean()
        v = float(e.sum())   # synchronizes
        cp.cuda.Device().synchronize()
        times.append((time.perf_counter() - t0) * 1e3)
        values.append(v)
        used, res = stats_fn()
        peak_used, peak_res = max(peak_used, used), max(peak_res, res)
        del a, b, c, f, e
    return times, values, peak_used, peak_res


def child(model, alloc, steps, out_path):
    t_start = time.perf_counter()
    result = {"model": model, "allocator": alloc, "steps": steps}
    global _granule_probe, _settle
    is_gpumem = alloc.startswith("gpumem")
    if model == "cupy_ops":
        if is_gpumem:
            import gpumem
            import gpumem.cupy
            gpumem.cupy.use(**gpumem_options(alloc))
        import cupy as cp
        pool = cp.get_default_memory_pool()
        if is_gpumem:
            def stats_fn():
                s = gpumem.stats()
                return s["live_bytes"], s["reserved_bytes"]
        else:
            def stats_fn():
                return pool.used_bytes(), pool.total_bytes()
        times, values, pu, pr = run_cupy_ops(cp, steps, stats_fn)
        if is_gpumem:   # exact peaks, not sampled
            s = gpumem.stats()
            pu, pr = s["peak_live_bytes"], s["peak_reserved_bytes"]
        result.update(peak_allocated_bytes=pu, peak_reserved_bytes=pr,
                      device=cp.cuda.runtime.getDeviceProperties(0)["name"].decode())
    else:
        if is_gpumem and os.environ.get("GPUMEM_TRACE_DIR"):
            # Every request of the run, for `gpumem replay` / `doctor` on a machine without a GPU.
            name = re.sub(r"[^A-Za-z0-9_.=-]+", "_", f"{model}-{alloc}")
            os.environ["GPUMEM_CONFIG"] = "trace=" + os.path.join(os.environ["GPUMEM_TRACE_DIR"], name + "-{pid}.csv")
        use_torch_allocator(alloc)  # first thing: before any CUDA allocation
        if is_gpumem:
            import gpumem
            import gpumem.torch
            _granule_probe = gpumem.stats
            if wants_settle(alloc):
                _settle = gpumem.settle
        import torch
        fn = globals()["run_" + model]
        times, values = fn(torch, steps)
        torch.cuda.synchronize()
        if is_gpumem:
            s = gpumem.stats()
            result.update(peak_allocated_bytes=s["peak_live_bytes"],
                          peak_reserved_bytes=s["peak_reserved_bytes"], gpumem_stats=s,
                          hooks=gpumem.torch.hooks)
        elif alloc != "pluggable-async":  # the probe keeps no figures
            result.update(peak_allocated_bytes=torch.cuda.max_memory_allocated(),
                          peak_reserved_bytes=torch.cuda.max_memory_reserved())
        result.update(device=torch.cuda.get_device_name(0), torch=torch.__version__)
    warm = min(WARM_STEPS[model], max(1, len(times) // 2))
    steady = times[warm:] or times
    if STEP_GRANULES:
        result.update(step_granules=STEP_GRANULES)
    result.update(step_ms_median=statistics.median(steady), step_ms=[round(t, 3) for t in times],
                  values=values, wall_s=round(time.perf_counter() - t_start, 2), ok=True)
    with open(out_path, "w") as f:
        json.dump(result, f)


# ----------------------------------------------------------------------------------------- parent
def run_one(model, alloc, steps):
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as tmp:
        path = tmp.name
    cmd = [sys.executable, os.path.abspath(__file__), "--child", model, "--alloc", alloc,
           "--steps", str(steps), "--out", path]
    t0 = time.perf_counter()
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=CHILD_TIMEOUT_S, env=child_env(alloc))
        rc, err = r.returncode, r.stderr
    except subprocess.TimeoutExpired as e:
        rc, err = "timeout", (e.stderr or b"").decode(errors="replace") if isinstance(e.stderr, bytes) else (e.stderr or "")
    res = None
    if rc == 0:
        try:
            with open(path) as f:
                res = json.load(f)
        except (OSError, json.JSONDecodeError) as e:
            err = f"no result: {e}"
    try:
        os.unlink(path)
    except OSError:
        pass
    if res is None:
        res = {"model": model, "allocator": alloc, "steps": steps, "ok": False, "rc": rc,
               "error": (err or "")[-1500:], "wall_s": round(time.perf_counter() - t0, 2)}
    return res


def compare(model, a, b):
    """(match, max relative difference) of the two runs' per-step values."""
    va, vb = a.get("values") or [], b.get("values") or []
    if not va or len(va) != len(vb):
        return False, None
    worst = 0.0
    for x, y in zip(va, vb):
        d = abs(x - y) / max(abs(x), abs(y), 1e-12)
        worst = max(worst, d)
    return worst <= RTOL[model], worst


def merge_runs(model, rs):
    """One result from repeated runs of one allocator: the median over every run's steady steps,
    the highest peaks, the first run's values (each run must match native on its own too)."""
    ok = [r for r in rs if r.get("ok")]
    if len(ok) != len(rs) or not ok:
        return next(r for r in rs if not r.get("ok"))
    merged = dict(ok[0])
    steady = []
    for r in ok:
        t = r.get("step_ms") or []
        steady += t[min(WARM_STEPS[model], max(1, len(t) // 2)):] or t
    merged["step_ms_median"] = statistics.median(steady)
    merged["runs"] = len(ok)
    for k in ("peak_allocated_bytes", "peak_reserved_bytes"):
        merged[k] = max(r.get(k) or 0 for r in ok)
    merged["step_granules"] = [g for r in ok for g in (r.get("step_granules") or [])[min(WARM_STEPS[model], max(1, len(r.get("step_granules") or []) // 2)):]]
    return merged


def steady_granules(run):
    """Mean granules mapped + unmapped per step after the warm-up steps, or '-'."""
    steady = run.get("step_granules") or []
    return f"{sum(steady) / len(steady):.1f}" if steady else "-"


def fmt_ratio(x, y):
    return f"{x / y:.3f}" if x and y else "-"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default=",".join(MODELS), help="comma-separated: " + ",".join(MODELS))
    ap.add_argument("--steps", type=int, default=0, help="steps per model (default: per model)")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--variants", default="",
                    help="more gpumem runs with pool options, ';'-separated, e.g. "
                         "'initial_reserve=8G;upstream=device' (each row is compared with native)")
    ap.add_argument("--repeat", type=int, default=1,
                    help="runs per allocator, interleaved (native, gpumem, native, gpumem, ...): the H200's "
                         "step times drift by several %% between runs, so one run each can mislead")
    ap.add_argument("--peers", default="",
                    help="comma-separated allocators that are not gpumem, also compared with native: " + ",".join(PEERS))
    ap.add_argument("--resnet-batch", type=int, default=RESNET_BATCH,
                    help="ResNet-50's batch (32: steps bound by the host's kernel launches on the H200; "
                         "128 and up: by the GPU)")
    ap.add_argument("--alloc", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    args = ap.parse_args()
    os.environ["GPUMEM_RESNET_BATCH"] = str(args.resnet_batch)  # the children read it
    if args.child:
        child(args.child, args.alloc, args.steps, args.out)
        return 0

    models = [m.strip() for m in args.models.split(",") if m.strip()]
    unknown = [m for m in models if m not in MODELS]
    if unknown:
        ap.error(f"unknown models: {unknown}")
    peers = [p.strip() for p in args.peers.split(",") if p.strip()]
    if any(p not in PEERS for p in peers):
        ap.error(f"unknown peers: {[p for p in peers if p not in PEERS]}; known: {PEERS}")
    allocs = ["native", "gpumem"] + ["gpumem:" + v.strip() for v in args.variants.split(";") if v.strip()] + peers
    rows, all_ok = [], True
    for model in models:
        steps = args.steps or DEFAULT_STEPS[model]
        runs = {}
        if model == "cupy_ops":
            # CuPy compiles kernels on first use and caches them on disk: a throwaway run first, so
            # neither measured run pays for compiling.
            run_one(model, "native", steps)
        model_allocs = [a for a in allocs if not (model == "cupy_ops" and a in PEERS)]  # PyTorch's only
        for rep in range(max(1, args.repeat)):
            for alloc in model_allocs:
                res = run_one(model, alloc, steps)
                line = {k: v for k, v in res.items() if k not in ("values", "step_ms", "step_granules")}
                print(json.dumps(dict(line, repeat=rep)), flush=True)
                print(json.dumps({"model": model, "allocator": alloc, "repeat": rep, "step_ms": res.get("step_ms"),
                                  "step_granules": res.get("step_granules")}), flush=True)
                all_ok &= bool(res.get("ok"))
                runs.setdefault(alloc, []).append(res)
        runs = {alloc: merge_runs(model, rs) for alloc, rs in runs.items()}
        n = runs["native"]
        for alloc in model_allocs[1:]:
            g = runs[alloc]
            match, diff = compare(model, n, g) if n.get("ok") and g.get("ok") else (False, None)
            all_ok &= match
            print(json.dumps({"model": model, "allocator": alloc, "compare": "outputs", "match": match,
                              "max_rel_diff": diff, "rtol": RTOL[model]}), flush=True)
            label = model if alloc == "gpumem" else f"{model} [{alloc.removeprefix('gpumem:')}]"
            rows.append((label, n, g, match, diff))

    print()
    hdr = (f"{'model':<34}{'native ms':>11}{'gpumem ms':>11}{'time g/n':>10}"
           f"{'n res/alloc':>13}{'g res/alloc':>13}{'res g/n':>9}{'gran/step':>10}{'outputs':>10}")
    print(hdr)
    print("-" * len(hdr))
    for model, n, g, match, diff in rows:
        nm, gm = n.get("step_ms_median"), g.get("step_ms_median")
        print(f"{model:<34}{(f'{nm:.2f}' if nm else '-'):>11}{(f'{gm:.2f}' if gm else '-'):>11}"
              f"{fmt_ratio(gm, nm):>10}"
              f"{fmt_ratio(n.get('peak_reserved_bytes'), n.get('peak_allocated_bytes')):>13}"
              f"{fmt_ratio(g.get('peak_reserved_bytes'), g.get('peak_allocated_bytes')):>13}"
              f"{fmt_ratio(g.get('peak_reserved_bytes'), n.get('peak_reserved_bytes')):>9}"
              f"{steady_granules(g):>10}"
              f"{('same' if match else 'FAILED' if not (n.get('ok') and g.get('ok')) else 'DIFFER'):>10}")
    print("\nRows [native-async] and [pluggable-async] are those peers in the gpumem columns."
          "\ntime g/n: median step time gpumem / native (after warm-up); res/alloc: peak reserved /"
          " peak allocated; res g/n: gpumem peak reserved / native peak reserved. cupy_ops' native"
          " is CuPy's MemoryPool (reserved = total_bytes(), sampled per iteration). gran/step: granules"
          " the driver mapped + unmapped for gpumem per step after warm-up (tens of µs each; a granule"
          " moved back where it was still mapped costs none).")
    return 0 if all_ok else 1


if __name__ == "__main__":
    sys.exit(main())
