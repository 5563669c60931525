#!/usr/bin/env bash
# Allocator speed on the GPU machine (issue "Speed"): runs the prebuilt `gpumem bench all --json`
# (gpumem's gpu_pool, cudaMalloc, cudaMallocAsync, CUB) with, where PyTorch is installed, its
# caching allocator in the same process (libgpumem_torch_peer.so, built here with g++ and loaded
# with --peer-lib); writes $OUT/bench.jsonl and prints a table with gpumem's ratio to every peer.
#
# The GPU machine has no fmt/CLI11/nlohmann/benchmark headers, so nothing is configured there:
#   here:   cmake --build build -j2 && scripts/device_bench.sh stage     # -> .carry/bench/
#   device: run(command="scripts/device_bench.sh", carry=[".carry/bench"])
# Env: REPS (default 5), GPUMEM_TRACES (trace folder; default shared/traces or ../shared/traces),
#      GPUMEM_DIST (default .carry/bench), SKIP_TORCH=1, BENCH_FLAGS (more `gpumem bench` flags, e.g.
#      "--grow-before-reclaim": gpumem's pool options; the peers are untouched by them).
set -euo pipefail
cd "$(dirname "$0")/.."
DIST=${GPUMEM_DIST:-.carry/bench}

if [[ "${1:-}" == stage ]]; then
  mkdir -p "$DIST"
  cp build/gpumem "$DIST/"
  # The torch peer's source and include/gpumem/bench_peer.h travel with the working tree.
  ls -la "$DIST"
  exit 0
fi

OUT=${OUT:-$PWD/bench-out}
mkdir -p "$OUT"
REPS=${REPS:-5}
nvidia-smi -L 2>/dev/null || true

TRACES=${GPUMEM_TRACES:-}
if [[ -z "$TRACES" ]]; then
  for d in shared/traces ../shared/traces /work/shared/traces; do
    if [[ -d $d ]]; then TRACES=$d; break; fi
  done
fi
trace_args=()
if [[ -n "$TRACES" ]]; then trace_args=(--traces "$TRACES"); else echo "no traces found: replay skipped" >&2; fi

# PyTorch's caching allocator joins the same process as a peer library (include/gpumem/bench_peer.h),
# built here against the installed torch with g++ (bench/torch/torch_peer.cpp).
peer_args=()
TORCH_DIR=$(python3 -c 'import torch,os;print(os.path.dirname(torch.__file__))' 2>/dev/null || true)
if [[ -z "${SKIP_TORCH:-}" && -n "$TORCH_DIR" && -d "$TORCH_DIR/include" ]]; then
  CUDA=${CUDA_HOME:-/usr/local/cuda}
  if g++ -std=c++20 -O2 -DNDEBUG -D_GLIBCXX_USE_CXX11_ABI=1 -fPIC -shared -Iinclude \
      -isystem "$TORCH_DIR/include" -isystem "$TORCH_DIR/include/torch/csrc/api/include" \
      -isystem "$CUDA/include" bench/torch/torch_peer.cpp \
      -L"$TORCH_DIR/lib" -lc10_cuda -lc10 -Wl,-rpath,"$TORCH_DIR/lib" \
      "$CUDA/lib64/libcudart_static.a" -ldl -lrt -lpthread \
      -o "$OUT/libgpumem_torch_peer.so" 2>"$OUT/torch_build.log"; then
    peer_args=(--peer-lib "$OUT/libgpumem_torch_peer.so")
  else
    echo "libgpumem_torch_peer.so did not build (torch at $TORCH_DIR):"; tail -20 "$OUT/torch_build.log"
  fi
else
  echo "PyTorch not found (or SKIP_TORCH): torch-caching skipped"
fi

rc=0
# shellcheck disable=SC2086  # BENCH_FLAGS is a list of flags
"$DIST/gpumem" bench all --json --reps "$REPS" ${BENCH_FLAGS:-} "${trace_args[@]}" "${peer_args[@]}" >"$OUT/bench.jsonl" 2>"$OUT/bench.stderr" || rc=$?
echo "gpumem bench: exit $rc ($(wc -l <"$OUT/bench.jsonl") lines)"
if [[ -s "$OUT/bench.stderr" ]]; then tail -5 "$OUT/bench.stderr"; fi

python3 - "$OUT/bench.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip().startswith("{")]
units = {"pair": "ns_per_pair", "churn": "ns_per_op", "threads": "mops_per_s", "replay": "ns_per_op",
         "replay-warm": "ns_per_op"}
def param(r):
    p = r["pattern"]
    if p == "pair":
        b = r["size_bytes"]; u = 0
        while b >= 1024 and b % 1024 == 0 and u < 4: b //= 1024; u += 1
        return f"{b} {['B','KiB','MiB','GiB','TiB'][u]}"
    if p == "threads": return f"{r['threads']} threads"
    if p in ("replay", "replay-warm"): return r["trace"]
    return p
allocs = list(dict.fromkeys(r["allocator"] for r in rows))
ours = [a for a in allocs if a.startswith("gpumem")]
for pat in ["pair", "churn", "threads", "replay", "replay-warm"]:
    pr = [r for r in rows if r["pattern"] == pat]
    if not pr: continue
    params = list(dict.fromkeys(param(r) for r in pr))
    cols = [a for a in allocs if any(r["allocator"] == a for r in pr)]
    cell = {(param(r), r["allocator"]): r for r in pr}
    key = units[pat]; higher = pat == "threads"
    ratios = [(o, c) for o in ours if o in cols for c in cols if c != o]
    print(f"\n{pat}: {key} (median); ratio = times faster gpumem is")
    print(f"  {'':<24}" + "".join(f" {c:>18}" for c in cols) + "".join(f" {'vs ' + c:>22}" for _, c in ratios))
    for p in params:
        line = f"  {p:<24}"
        for c in cols:
            r = cell.get((p, c))
            line += f" {'-' if r is None else ('error' if key not in r else format(r[key], '.4g')):>18}"
        for o, c in ratios:
            a, b = cell.get((p, o)), cell.get((p, c))
            if not a or not b or key not in a or key not in b or a[key] <= 0 or b[key] <= 0:
                line += f" {'-':>22}"; continue
            x = a[key] / b[key] if higher else b[key] / a[key]
            line += f" {x:>21.2f}x"
        print(line)
for r in rows:
    if "error" in r: print("error:", r["pattern"], param(r), r["allocator"], r["error"])
PY
exit $rc
