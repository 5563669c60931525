#!/usr/bin/env bash
# One GPU call, whatever a session needs of it: the GPU tests (and some again under
# compute-sanitizer); `gpumem bench` patterns for this build and, carried as gpumem-base, an
# earlier one, under each pool policy; one-pass replays through the GPU pool; and the PyTorch /
# CuPy models (integrations/bench_models.py via scripts/device_torch.sh) with their variants.
# Which of these run, and how, is set by the variables below; logs go straight to $OUT/w and a
# summary is printed last.
#   here:   cmake --build build-carry; copy gpumem, libgpumem.a, gpumem_gpu_tests, traces to
#           .carry/gpu (and the previous gpumem as .carry/gpu/gpumem-base); the two .so to .carry/torch
#   device: run(command="bash scripts/device_handles.sh", carry=[".carry/gpu", ".carry/torch"])
# Env: SKIP_TESTS=1, SKIP_TORCH=1, MODELS (default resnet50_train), REPEAT (default 2), VARIANTS,
#      RESNET_BATCH, BINS (default "gpumem-base gpumem"), PATTERNS (default "churn replay"),
#      POLICIES (pool flags per run, "|"-separated; default "|--grow-before-reclaim"),
#      ALLOC_LOOP=1 (bench_alloc_loop.py; ALLOC_LOOP_ALLOCATORS, default native, gpumem and the two
#      cudaMallocAsync peers; with OLD_PY set to a folder holding an older gpumem package, its
#      gpumem allocators run again from there, as "old:..."),
#      PIN (a CPU for taskset: the bench runs pinned to it), RUNS (bench runs per policy, default 1),
#      PEER_PATTERNS (e.g. "replay": `gpumem bench` for PEER_ALLOCATORS, default cuda-malloc-async
#      and cub-caching, in one process), TRACE=1 (each gpumem model run records its requests:
#      torch/traces/ in the tarball), SKIP_SMOKE= (empty: run the smoke check first),
#      SANITIZE_FILTER (a gtest filter: those GPU tests again under compute-sanitizer memcheck),
#      TORCH_BASE=1 (the models model by model with .carry/torch-base, an earlier build's adaptor,
#      and with this one, each beside PyTorch's own allocator: torch-base-MODEL/, torch-new-MODEL/).
set -u
cd "$(dirname "$0")/.."
D=.carry/gpu
FINAL=${OUT:-/tmp/gpumem-handles}
# Logs are written straight under $FINAL/w, so a call cut off at its time limit still brings back
# what its finished runs wrote. (Emptied first: several logs are appended to.)
W="$FINAL/w"
rm -rf "$W"
mkdir -p "$W"
export PYTHONUNBUFFERED=1

if [[ -z "${SKIP_TESTS:-}" ]]; then
  GPUMEM_EXAMPLES="$PWD/examples" timeout ${TEST_TIMEOUT:-120} "$D/gpumem_gpu_tests" > "$W/gpu_tests.log" 2>&1
  echo "gpu tests rc=$?" >> "$W/gpu_tests.log"
fi
# SANITIZE_FILTER: those GPU tests again under compute-sanitizer's memcheck.
if [[ -n "${SANITIZE_FILTER:-}" ]]; then
  GPUMEM_EXAMPLES="$PWD/examples" timeout 180 compute-sanitizer --tool memcheck --leak-check full \
    "$D/gpumem_gpu_tests" --gtest_filter="$SANITIZE_FILTER" > "$W/sanitizer.log" 2>&1
  echo "sanitizer rc=$?" >> "$W/sanitizer.log"
fi

# POLICIES: pool flags per run, separated by "|" (an empty entry: the defaults).
IFS='|' read -r -a policies <<< "${POLICIES-|--grow-before-reclaim}"
label_of() { echo "$1" | sed 's/--grow-before-reclaim/grow/; s/--reclaim-own-first/own/; s/--front-cache-peak-fraction /peak/; s/--//g; s/ /+/g'; }
# Runs outermost: the binaries and policies take turns, so a host that is slower for a while
# (H200 hosts vary up to 2x over minutes) does not fall on one binary's runs alone.
for run in $(seq 1 "${RUNS:-1}"); do
  for bin in ${BINS:-gpumem-base gpumem}; do
    [[ -x "$D/$bin" ]] || continue
    for policy in "${policies[@]}"; do
      label=$(label_of "$policy")
      for pattern in ${PATTERNS:-churn replay}; do
        timeout 100 ${PIN:+taskset -c "$PIN"} "$D/$bin" bench $pattern --allocator gpumem-gpu --reps 3 --traces "$D/traces" \
          $policy --json 2>> "$W/bench.err" \
          | sed "s/\"allocator\":\"gpumem-gpu\"/\"allocator\":\"$bin${label:++$label}\"/" >> "$W/speed.jsonl"
      done
    done
  done
done
for bin in ${BINS:-gpumem-base gpumem}; do
  [[ -x "$D/$bin" ]] || continue
  for policy in "${policies[@]}"; do
    label=$(label_of "$policy")
    for t in "$D"/traces/*.csv.gz; do
      echo "$bin ${label:-default} $(basename "$t") $(timeout 60 "$D/$bin" replay "$t" --resource gpu-pool $policy --json)" >> "$W/replay.txt"
    done
  done
done

if [[ -n "${PEER_PATTERNS:-}" ]]; then
  for pattern in $PEER_PATTERNS; do
    timeout 150 "$D/gpumem" bench $pattern --allocator ${PEER_ALLOCATORS:-cuda-malloc-async cub-caching} --reps 3 \
      --traces "$D/traces" --json 2>> "$W/bench.err" >> "$W/speed.jsonl"
  done
fi

if [[ -n "${ALLOC_LOOP:-}" ]]; then
  loop_allocs=${ALLOC_LOOP_ALLOCATORS:-native,gpumem,native-async,pluggable-async}
  GPUMEM_LIB="$PWD/.carry/torch/libgpumem_torch.so" PYTHONPATH="$PWD/integrations/python" timeout 200 \
    python3 integrations/bench_alloc_loop.py --allocators "$loop_allocs" > "$W/alloc_loop.txt" 2>&1
  if [[ -n "${OLD_PY:-}" ]]; then
    old_allocs=$(echo "$loop_allocs" | tr ',' '\n' | grep gpumem | paste -sd,)
    echo "== the same gpumem allocators from $OLD_PY" >> "$W/alloc_loop.txt"
    GPUMEM_LIB="$PWD/.carry/torch/libgpumem_torch.so" PYTHONPATH="$PWD/$OLD_PY:$PWD/integrations" timeout 200 \
      python3 integrations/bench_alloc_loop.py --allocators "$old_allocs" >> "$W/alloc_loop.txt" 2>&1
  fi
fi

if [[ -z "${SKIP_TORCH:-}" && -n "${TORCH_BASE:-}" ]]; then
  # TORCH_BASE=1: model by model, the carried earlier adaptor (.carry/torch-base) and this one take
  # turns, each beside PyTorch's own allocator in the same call, so a host that drifts slows both.
  IFS=',' read -r -a ab_models <<< "${MODELS:-resnet50_train}"
  for model in "${ab_models[@]}"; do
    for side in base new; do
      dist=.carry/torch; [[ $side == base ]] && dist=.carry/torch-base
      GPUMEM_DIST=$dist OUT="$W/torch-$side-$model" MODELS=$model REPEAT=${REPEAT:-1} VARIANTS=${VARIANTS-} PEERS= \
        SKIP_SMOKE=1 timeout ${TORCH_TIMEOUT:-200} bash scripts/device_torch.sh > "$W/torch-$side-$model.txt" 2>&1
    done
  done
elif [[ -z "${SKIP_TORCH:-}" ]]; then
  [[ -n "${TRACE:-}" ]] && { export GPUMEM_TRACE_DIR="$W/torch/traces"; mkdir -p "$GPUMEM_TRACE_DIR"; }
  OUT="$W/torch" MODELS=${MODELS:-resnet50_train} REPEAT=${REPEAT:-2} VARIANTS=${VARIANTS-grow_before_reclaim=1} \
    PEERS=${PEERS-native-async,pluggable-async} SKIP_SMOKE=${SKIP_SMOKE-1} timeout ${TORCH_TIMEOUT:-360} \
    bash scripts/device_torch.sh > "$W/torch.txt" 2>&1
fi

[[ -f "$W/gpu_tests.log" ]] && { echo "== GPU tests"; grep -E "PASSED|FAILED|rc=" "$W/gpu_tests.log" | tail -6; }
[[ -f "$W/sanitizer.log" ]] && { echo "== compute-sanitizer"; grep -E "ERROR SUMMARY|PASSED|FAILED|rc=" "$W/sanitizer.log" | tail -5; }
echo "== speed (ns/op, ns/pair, Mops/s)"
grep -o '"pattern":"[^"]*","allocator":"[^"]*".*"\(ns_per_op\|ns_per_pair\|mops_per_s\)":[0-9.e+]*\(,"peak_reserved_over_live":[0-9.e+]*,"granules_moved":[0-9]*\(,"driver_granules":[0-9]*\)\?\)\?' \
  "$W/speed.jsonl" | sed 's/"device":"[^"]*",//; s/"//g; s/pattern://; s/allocator://; s/peak_reserved_over_live/res/'
echo "== replay on the GPU pool: frag, ns/op, maps, upstream calls"
sed -E 's/\{.*"fragmentation":([0-9.]+).*"granules_mapped_unmapped_per_1000_ops":([0-9.]+).*"maps":([0-9]+).*"ns_per_op":([0-9.]+).*"upstream_calls":([0-9]+).*/frag \1 moved\/1k \2 maps \3 ns \4 up \5/' "$W/replay.txt"
tail -3 "$W/bench.err"
grep -v '^{' "$W/alloc_loop.txt" 2>/dev/null | tail -14
grep -hE "^(FAIL|SMOKE)" "$W/torch/smoke.log" "$W/torch/smoke_cupy.log" 2>/dev/null
tail -14 "$W/torch.txt" 2>/dev/null
for d in "$W"/torch-base-* "$W"/torch-new-*; do [[ -d $d ]] && { echo "== $(basename "$d")"; sed -n '/^model /,/^$/p' "$d/bench_models.log" | sed -n '3,$p'; }; done
