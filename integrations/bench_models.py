#!/usr/bin/env python3
"""gpumem's default (`gpumem.torch.use()`, no options) against PyTorch's own caching allocator,
plain and with expandable segments, on real models: the integration test and benchmark for the GPU
machine. No network, no downloads: models are built from configs with random weights, inputs are
random tokens / images with fixed seeds.

Each (model, allocator) runs in a fresh subprocess (an allocator can only be chosen before the
first CUDA allocation; PYTORCH_CUDA_ALLOC_CONF is read when PyTorch sets its allocator up). The
child times every step (torch.cuda.synchronize() around it), records peak allocated / peak reserved
bytes and every step's loss / output checksum; the parent runs the allocators interleaved (native,
gpumem, native-expandable, then the next round in reverse order) for as many rounds as --repeat and
--budget-s allow, checks each run's outputs against native's within tolerance, and ends with one
table per model: median step time over every round's steps after warm-up, peak reserved / peak
allocated, both against native, and the default's goals (step time <= 1.00x native's median, peak
reserved <= 1.03x peak allocated).

    PYTHONPATH=integrations/python GPUMEM_LIB=build/integrations \
        python3 integrations/bench_models.py [--models resnet50_train,...] [--repeat N] [--budget-s S]
        [--json-out FILE]

Models: resnet50_train, gpt2_train, bert_infer, llama_generate (the default set), and cupy_ops
(CuPy's MemoryPool against gpumem.cupy.use()). A model whose packages are not installed
(torchvision, transformers, cupy) is skipped with the reason, not failed.
--peers adds PyTorch allocators that are not gpumem, each compared with native like gpumem:
native-async (PyTorch's own cudaMallocAsync backend) and pluggable-async (the same cudaMallocAsync
behind CUDAPluggableAllocator, libgpumem_pluggable_probe.so): their difference is what the pluggable
interface itself costs a step, whatever allocator is behind it.
--json-out FILE: every run's line, and the goals as JSON lines (pattern "goal", the schema of
`gpumem bench`'s), for scripts/results_md.py goals.
GPUMEM_TRACE_DIR=DIR: each gpumem run also records every request it served as a trace there
(DIR/<model>-<allocator>-<pid>.csv, RMM's log CSV), for `gpumem replay` / `doctor` without a GPU.
Exit status: 0 when every run that was not skipped finished and every comparison matched (goals not
met included: they are figures, in the table), 1 otherwise.
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

from fresh_runs import EXPANDABLE, PEERS, child_env, use_torch_allocator

MODELS = ["resnet50_train", "gpt2_train", "bert_infer", "llama_generate", "cupy_ops"]
DEFAULT_MODELS = ["resnet50_train", "gpt2_train", "bert_infer", "llama_generate"]
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
# The default's goals on live models: gpumem's median step time / native's, and gpumem's peak
# reserved / peak allocated.
GOAL_STEP = 1.00
GOAL_RESERVE = 1.03
# Packages a model needs beyond torch: without them the model is skipped, not failed.
OPTIONAL_PACKAGES = ("torchvision", "transformers", "cupy", "numpy")


# ------------------------------------------------------------------------------------------ child
# gpumem runs: granules the driver mapped + unmapped during each timed step (each costs tens of µs
# of driver time on a GPU), so a slow step can be told apart from a slow allocator.
STEP_GRANULES: list = []
_granule_probe = None


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
    result = {"model": model, "allocator": alloc, "steps": steps}
    try:
        child_run(model, alloc, steps, result)
    except ImportError as e:
        if (e.name or "").split(".")[0] not in OPTIONAL_PACKAGES:
            raise
        result.update(ok=False, skipped=f"{e.name} is not installed")
    with open(out_path, "w") as f:
        json.dump(result, f)


def child_run(model, alloc, steps, result):
    t_start = time.perf_counter()
    global _granule_probe
    is_gpumem = alloc == "gpumem"
    if model == "cupy_ops":
        if is_gpumem:
            import gpumem
            import gpumem.cupy
            gpumem.cupy.use()
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
        use_torch_allocator(alloc)  # first thing: before any CUDA allocation; gpumem: use() with no options
        if is_gpumem:
            import gpumem
            import gpumem.torch
            _granule_probe = gpumem.stats
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


# ----------------------------------------------------------------------------------------- parent
def run_one(model, alloc, steps, timeout_s=CHILD_TIMEOUT_S):
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as tmp:
        path = tmp.name
    cmd = [sys.executable, os.path.abspath(__file__), "--child", model, "--alloc", alloc,
           "--steps", str(steps), "--out", path]
    t0 = time.perf_counter()
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, env=child_env(alloc))
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


def goal_record(model, what, goal, value, bound, unit, device, why="not measured"):
    """A goal line in `gpumem bench`'s schema; value None: not measured, `why` says why."""
    return {"pattern": "goal", "goal": goal, "what": f"{model}: {what}", "allocator": "gpumem",
            "device": device or "gpu", "param": model, **({"value": round(value, 6)} if value is not None else {}),
            "unit": unit, "compare": "<=", "bound": bound, "met": None if value is None else value <= bound,
            **({} if value is not None else {"note": why})}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default=",".join(DEFAULT_MODELS), help="comma-separated: " + ",".join(MODELS))
    ap.add_argument("--steps", type=int, default=0, help="steps per model (default: per model)")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--repeat", type=int, default=3,
                    help="rounds of runs, each round every allocator once per model, interleaved (reversed every "
                         "other round): step times drift by several %% between runs, so one run each can mislead")
    ap.add_argument("--budget-s", type=float, default=210,
                    help="wall time for the whole benchmark: no round starts past it but the first, and the first "
                         "skips the models it cannot start in time, all but its first (default 210)")
    ap.add_argument("--peers", default="",
                    help="comma-separated allocators that are not gpumem, also compared with native: " + ",".join(PEERS))
    ap.add_argument("--resnet-batch", type=int, default=RESNET_BATCH,
                    help="ResNet-50's batch (32: steps bound by the host's kernel launches on the H200; "
                         "128 and up: by the GPU)")
    ap.add_argument("--json-out", help="every run's line and the goals, as JSON lines, to this file")
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
    json_out = open(args.json_out, "w") if args.json_out else None

    def emit(obj):
        line = json.dumps(obj)
        print(line, flush=True)
        if json_out:
            json_out.write(line + "\n")
            json_out.flush()

    allocs = ["native", "gpumem", EXPANDABLE] + peers
    model_allocs = {m: [a for a in allocs if not (m == "cupy_ops" and (a in PEERS or a == EXPANDABLE))] for m in models}
    runs = {m: {} for m in models}
    skipped = {}   # model -> why
    all_ok = True
    t0 = time.monotonic()
    round_s = 0.0
    rounds = 0
    for rep in range(max(1, args.repeat)):
        elapsed = time.monotonic() - t0
        if rep and elapsed + round_s > args.budget_s:
            print(f"bench_models: {rounds} round(s) in {elapsed:.0f} s; another would pass --budget-s "
                  f"{args.budget_s:g}", file=sys.stderr, flush=True)
            break
        r0 = time.monotonic()
        for model in models:
            if model in skipped:
                continue
            if time.monotonic() - t0 > args.budget_s and (rep or any(runs.values())):
                if not rep:
                    skipped[model] = f"no time left in --budget-s {args.budget_s:g}"
                continue
            steps = args.steps or DEFAULT_STEPS[model]
            if model == "cupy_ops" and not rep:
                # CuPy compiles kernels on first use and caches them on disk: a throwaway run first, so
                # no measured run pays for compiling.
                run_one(model, "native", steps)
            order = model_allocs[model] if rep % 2 == 0 else model_allocs[model][::-1]
            for alloc in order:
                left = args.budget_s - (time.monotonic() - t0)
                res = run_one(model, alloc, steps, timeout_s=max(30.0, min(CHILD_TIMEOUT_S, left + 60)))
                if res.get("skipped"):
                    skipped[model] = res["skipped"]
                    emit({"model": model, "allocator": alloc, "skipped": res["skipped"]})
                    break
                line = {k: v for k, v in res.items() if k not in ("values", "step_ms", "step_granules", "gpumem_stats")}
                emit(dict(line, repeat=rep))
                all_ok &= bool(res.get("ok"))
                runs[model].setdefault(alloc, []).append(res)
        rounds += 1
        round_s = time.monotonic() - r0

    goals, tables = [], []
    for model in models:
        if model in skipped:
            goals.append(goal_record(model, "step time / native's median", "model_step", None, GOAL_STEP, "x", None,
                                     skipped[model]))
            goals.append(goal_record(model, "peak reserved / peak allocated", "model_reserve", None, GOAL_RESERVE,
                                     "x", None, skipped[model]))
            continue
        merged = {alloc: merge_runs(model, rs) for alloc, rs in runs[model].items()}
        n = merged.get("native", {})
        rows = []
        for alloc in model_allocs[model]:
            g = merged.get(alloc)
            if g is None:
                continue
            match, diff = (True, 0.0) if alloc == "native" else (
                compare(model, n, g) if n.get("ok") and g.get("ok") else (False, None))
            if alloc != "native":
                all_ok &= match
                emit({"model": model, "allocator": alloc, "compare": "outputs", "match": match,
                      "max_rel_diff": diff, "rtol": RTOL[model]})
            rows.append((alloc, g, match))
        tables.append((model, n, rows))
        g = merged.get("gpumem", {})
        device = g.get("device")
        step = g.get("step_ms_median") / n["step_ms_median"] if g.get("ok") and n.get("step_ms_median") else None
        res = (g["peak_reserved_bytes"] / g["peak_allocated_bytes"]
               if g.get("ok") and g.get("peak_allocated_bytes") else None)
        why = ("gpumem's run failed" if not g.get("ok") else "native's run failed" if not n.get("ok")
               else "not measured")
        goals.append(goal_record(model, "step time / native's median", "model_step", step, GOAL_STEP, "x", device,
                                 why))
        goals.append(goal_record(model, "peak reserved / peak allocated", "model_reserve", res, GOAL_RESERVE, "x",
                                 device, why))
    for goal in goals:
        if json_out:
            json_out.write(json.dumps(goal) + "\n")
    if json_out:
        json_out.close()

    print()
    print(f"bench_models: {rounds} round(s) of interleaved runs in {time.monotonic() - t0:.0f} s; step ms: the median "
          "of every round's steps after warm-up")
    hdr = (f"{'model':<16}{'allocator':<20}{'runs':>5}{'step ms':>10}{'vs native':>11}{'peak res MiB':>14}"
           f"{'res/alloc':>11}{'res vs native':>15}{'gran/step':>11}{'outputs':>9}")
    print(hdr)
    print("-" * len(hdr))
    for model, n, rows in tables:
        for alloc, g, match in rows:
            ms = g.get("step_ms_median")
            mib = g.get("peak_reserved_bytes")
            out = "-" if alloc == "native" else "same" if match else "FAILED" if not g.get("ok") else "DIFFER"
            print(f"{model:<16}{alloc:<20}{g.get('runs', 0) if g.get('ok') else 0:>5}{(f'{ms:.2f}' if ms else '-'):>10}"
                  f"{fmt_ratio(ms, n.get('step_ms_median')):>11}{(f'{mib / 2**20:,.0f}' if mib else '-'):>14}"
                  f"{fmt_ratio(g.get('peak_reserved_bytes'), g.get('peak_allocated_bytes')):>11}"
                  f"{fmt_ratio(g.get('peak_reserved_bytes'), n.get('peak_reserved_bytes')):>15}"
                  f"{(steady_granules(g) if alloc == 'gpumem' else '-'):>11}{out:>9}")
    for model, why in skipped.items():
        print(f"{model:<16}skipped: {why}")
    print("\nvs native: median step time / native's; res/alloc: peak reserved / peak allocated (gpumem: requested"
          " bytes live); res vs native: peak reserved / native's. cupy_ops' native is CuPy's MemoryPool (reserved ="
          " total_bytes(), sampled per iteration). gran/step: granules the driver mapped + unmapped for gpumem per"
          " step after warm-up.")
    met = sum(1 for x in goals if x["met"])
    measured = sum(1 for x in goals if x["met"] is not None)
    print(f"\ngoals of the default (gpumem.torch.use() with no options): {met} of {measured} met")
    for x in goals:
        value = f"{x['value']:.3f}" if "value" in x else "-"
        verdict = {True: "met", False: "NOT MET", None: "not measured"}[x["met"]]
        note = f" ({x['note']})" if x.get("note") and x["note"] != verdict else ""
        print(f"  {x['what']:<48}{value:>8}  {x['compare']} {x['bound']:.2f}  {verdict}{note}")
    return 0 if all_ok else 1


if __name__ == "__main__":
    sys.exit(main())
