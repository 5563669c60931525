#!/usr/bin/env bash
# gpumem inside PyTorch and CuPy on the GPU machine (issue "Drop-in for PyTorch and CuPy"): the
# smoke checks (PyTorch, then CuPy), then integrations/bench_models.py (each model with PyTorch's / CuPy's allocator
# and with gpumem, in fresh processes). Logs under $OUT.
#
# The .so is built here (the GPU machine has no compiler setup for it) and carried:
#   here:   cmake --build build -j2 --target gpumem_torch && scripts/device_torch.sh stage   # -> .carry/torch/
#   device: run(command="scripts/device_torch.sh", carry=[".carry/torch"])
# Env: GPUMEM_DIST (default .carry/torch), MODELS (default all), STEPS (default per model),
#      VARIANTS (more gpumem runs with pool options, e.g. "idle_budget=0.1;idle_budget=0.25"),
#      REPEAT (runs per allocator, interleaved), PEERS (e.g. "native-async,pluggable-async"),
#      RESNET_BATCH (ResNet-50's batch, default 32),
#      SKIP_BENCH=1 (smoke only), SKIP_SMOKE=1 (models only).
set -uo pipefail
cd "$(dirname "$0")/.."
DIST=${GPUMEM_DIST:-.carry/torch}

if [[ "${1:-}" == stage ]]; then
  mkdir -p "$DIST"
  cp build/integrations/libgpumem_torch.so build/integrations/libgpumem_pluggable_probe.so "$DIST/"
  ldd "$DIST/libgpumem_torch.so"
  ls -la "$DIST"
  exit 0
fi

OUT=${OUT:-$PWD/torch-out}
mkdir -p "$OUT"
export GPUMEM_LIB="$PWD/$DIST/libgpumem_torch.so"
export PYTHONPATH="$PWD/integrations/python${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
PY=${PYTHON:-python3}

{
  nvidia-smi -L 2>/dev/null || true
  ldd "$GPUMEM_LIB"
  ldd --version | head -1
  $PY -c 'import torch, sys; print("torch", torch.__version__, "cuda", torch.version.cuda, "python", sys.version.split()[0])' || true
  $PY -c 'import cupy; print("cupy", cupy.__version__)' || true
  $PY -c 'import transformers, torchvision; print("transformers", transformers.__version__, "torchvision", torchvision.__version__)' || true
} 2>&1 | tee "$OUT/env.txt"

rc=0
if [[ -z "${SKIP_SMOKE:-}" ]]; then
  echo "== smoke"
  timeout 300 $PY integrations/smoke_torch.py 2>&1 | tee "$OUT/smoke.log"
  smoke_rc=${PIPESTATUS[0]}
  echo "smoke: exit $smoke_rc"
  [[ $smoke_rc -eq 0 ]] || rc=1
  echo "== smoke (CuPy)"
  timeout 120 $PY integrations/smoke_cupy.py 2>&1 | tee "$OUT/smoke_cupy.log"
  smoke_rc=${PIPESTATUS[0]}
  echo "smoke (CuPy): exit $smoke_rc"
  [[ $smoke_rc -eq 0 ]] || rc=1
fi

if [[ -z "${SKIP_BENCH:-}" ]]; then
  echo "== bench_models"
  args=()
  [[ -n "${MODELS:-}" ]] && args+=(--models "$MODELS")
  [[ -n "${STEPS:-}" ]] && args+=(--steps "$STEPS")
  [[ -n "${VARIANTS:-}" ]] && args+=(--variants "$VARIANTS")
  [[ -n "${REPEAT:-}" ]] && args+=(--repeat "$REPEAT")
  [[ -n "${PEERS:-}" ]] && args+=(--peers "$PEERS")
  [[ -n "${RESNET_BATCH:-}" ]] && args+=(--resnet-batch "$RESNET_BATCH")
  timeout ${BENCH_TIMEOUT:-540} $PY integrations/bench_models.py "${args[@]}" >"$OUT/bench_models.log" 2>"$OUT/bench_models.stderr"
  bench_rc=$?
  grep '^{' "$OUT/bench_models.log" >"$OUT/bench_models.jsonl" || true
  cat "$OUT/bench_models.log"
  tail -20 "$OUT/bench_models.stderr"
  echo "bench_models: exit $bench_rc"
  [[ $bench_rc -eq 0 ]] || rc=1
fi
exit $rc
