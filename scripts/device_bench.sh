#!/usr/bin/env bash
# Allocator speed on the GPU machine (issue "Speed"): runs the prebuilt `gpumem bench all`
# (gpumem's gpu_pool, cudaMalloc, cudaMallocAsync, CUB) with, where PyTorch is installed, its
# caching allocator in the same process (libgpumem_torch_peer.so, built here with g++ and loaded
# with --peer-lib); writes $OUT/bench.jsonl and $OUT/bench.txt, and prints gpumem bench's tables
# (gpumem's ratio to every peer).
#
# The GPU machine has no fmt/CLI11/nlohmann/benchmark headers, so nothing is configured there:
#   here:   cmake --build build -j2 && scripts/device_bench.sh stage     # -> .carry/bench/
#   device: run(command="scripts/device_bench.sh", carry=[".carry/bench"])
# Env: REPS (default 5), GPUMEM_TRACES (trace folder; default shared/traces or ../shared/traces),
#      GPUMEM_DIST (default .carry/bench), SKIP_TORCH=1, BENCH_FLAGS (more `gpumem bench` flags, e.g.
#      "--grow-before-reclaim": gpumem's pool options; the peers are untouched by them),
#      PIN (a CPU list for taskset: the one-thread patterns run pinned there, one process each, and
#      threads on every core; it keeps the scheduler from moving the process, but session 21's
#      per-core sweep found the host's speed changing with the moment, not the core), PEER_LIB (a prebuilt libgpumem_torch_peer.so: no build here),
#      ROUNDS (default 1: `gpumem bench --rounds`, the allocators taking turns that many times).
set -euo pipefail
cd "$(dirname "$0")/.."
DIST=${GPUMEM_DIST:-.carry/bench}

if [[ "${1:-}" == stage ]]; then
  mkdir -p "$DIST"
  cp build/gpumem "$DIST/"
  # The torch peer's source and src/cli/bench_peer.h travel with the working tree.
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

# PyTorch's caching allocator joins the same process as a peer library (src/cli/bench_peer.h),
# built here against the installed torch with g++ (bench/torch/torch_peer.cpp).
peer_args=()
TORCH_DIR=$(python3 -c 'import torch,os;print(os.path.dirname(torch.__file__))' 2>/dev/null || true)
if [[ -z "${SKIP_TORCH:-}" && -z "${PEER_LIB:-}" && -n "$TORCH_DIR" && -d "$TORCH_DIR/include" ]]; then
  CUDA=${CUDA_HOME:-/usr/local/cuda}
  if g++ -std=c++20 -O2 -DNDEBUG -D_GLIBCXX_USE_CXX11_ABI=1 -fPIC -shared -Isrc/cli \
      -isystem "$TORCH_DIR/include" -isystem "$TORCH_DIR/include/torch/csrc/api/include" \
      -isystem "$CUDA/include" bench/torch/torch_peer.cpp \
      -L"$TORCH_DIR/lib" -lc10_cuda -lc10 -Wl,-rpath,"$TORCH_DIR/lib" \
      "$CUDA/lib64/libcudart_static.a" -ldl -lrt -lpthread \
      -o "$OUT/libgpumem_torch_peer.so" 2>"$OUT/torch_build.log"; then
    peer_args=(--peer-lib "$OUT/libgpumem_torch_peer.so")
  else
    echo "libgpumem_torch_peer.so did not build (torch at $TORCH_DIR):"; tail -20 "$OUT/torch_build.log"
  fi
elif [[ -n "${PEER_LIB:-}" ]]; then
  echo "PyTorch's caching allocator: the prebuilt $PEER_LIB"
else
  echo "PyTorch not found (or SKIP_TORCH): torch-caching skipped"
fi

rc=0
if [[ -n "${PEER_LIB:-}" ]]; then peer_args=(--peer-lib "$PEER_LIB"); fi
# The tables (gpumem's ratio to every peer, its reserve beside its speed) to stdout; every figure as a
# JSON line in $OUT/bench.jsonl, written as it is measured.
: > "$OUT/bench.txt"
: > "$OUT/bench.stderr"
if [[ -z "${PIN:-}" ]]; then
  # shellcheck disable=SC2086  # BENCH_FLAGS is a list of flags
  "$DIST/gpumem" bench all --json-out "$OUT/bench.jsonl" --reps "$REPS" --rounds "${ROUNDS:-1}" ${BENCH_FLAGS:-} "${trace_args[@]}" "${peer_args[@]}" \
    >"$OUT/bench.txt" 2>"$OUT/bench.stderr" || rc=$?
else
  : > "$OUT/bench.jsonl"
  for pattern in pair churn replay threads; do
    pin=(taskset -c "$PIN")
    [[ $pattern == threads ]] && pin=()
    # shellcheck disable=SC2086
    "${pin[@]}" "$DIST/gpumem" bench "$pattern" --json-out "$OUT/bench-$pattern.jsonl" --reps "$REPS" --rounds "${ROUNDS:-1}" ${BENCH_FLAGS:-} \
      "${trace_args[@]}" "${peer_args[@]}" >>"$OUT/bench.txt" 2>>"$OUT/bench.stderr" || rc=$?
    cat "$OUT/bench-$pattern.jsonl" >> "$OUT/bench.jsonl"
  done
  echo "one-thread patterns pinned to CPU(s) $PIN (taskset); threads on every core" >> "$OUT/bench.txt"
fi
echo "gpumem bench: exit $rc ($(cat "$OUT/bench.jsonl" 2>/dev/null | wc -l) figures)"
grep -v '^gpumem bench: [a-z-]*\.\.\.$' "$OUT/bench.stderr" | tail -5 || true
cat "$OUT/bench.txt"
exit $rc
