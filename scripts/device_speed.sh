#!/usr/bin/env bash
# One GPU call for the Speed issue (session 4): the GPU tests; every allocator on every pattern
# (scripts/device_bench.sh: gpumem's default pool, cudaMalloc, cudaMallocAsync, CUB, PyTorch's
# caching allocator); gpumem again with --grow-before-reclaim; the threads pattern on the simulated
# device under both policies; each shared trace replayed on the GPU pool under both (peak reserved
# / peak live). Logs packed into one file under $OUT; a summary printed last.
#   here:   cmake --build build-carry; copy gpumem, libgpumem.a, gpumem_gpu_tests, traces to .carry/gpu
#   device: run(command="bash scripts/device_speed.sh", carry=[".carry/gpu"])
# Env: REPS (default 3), SKIP_TESTS=1, SKIP_PEERS=1 (gpumem alone, when device time is short).
set -u
cd "$(dirname "$0")/.."
D=.carry/gpu
FINAL=${OUT:-/tmp/gpumem-speed}
W=$(mktemp -d)
mkdir -p "$FINAL"
REPS=${REPS:-3}

if [[ -z "${SKIP_TESTS:-}" ]]; then
  GPUMEM_EXAMPLES="$PWD/examples" timeout ${TEST_TIMEOUT:-90} "$D/gpumem_gpu_tests" > "$W/gpu_tests.log" 2>&1
  echo "gpu tests rc=$?" >> "$W/gpu_tests.log"
fi
if [[ -z "${SKIP_PEERS:-}" ]]; then
  OUT="$W/peers" GPUMEM_DIST="$D" GPUMEM_TRACES="$D/traces" REPS="$REPS" timeout ${PEERS_TIMEOUT:-300} \
    bash scripts/device_bench.sh > "$W/peers.txt" 2>&1
else
  timeout 150 "$D/gpumem" bench all --allocator gpumem-gpu --reps "$REPS" --traces "$D/traces" --json \
    > "$W/default.jsonl" 2>> "$W/bench.err"
fi

timeout 150 "$D/gpumem" bench all --allocator gpumem-gpu --reps "$REPS" --traces "$D/traces" --grow-before-reclaim --json \
  2>> "$W/bench.err" | sed 's/"allocator":"gpumem-gpu"/"allocator":"gpumem-gpu+grow"/' > "$W/grow.jsonl"
for policy in "" --grow-before-reclaim; do
  timeout 60 "$D/gpumem" bench threads --simulate --allocator gpumem-sim --reps "$REPS" $policy --json 2>> "$W/bench.err" \
    | sed "s/\"allocator\":\"gpumem-sim\"/\"allocator\":\"gpumem-sim${policy:++grow}\"/" >> "$W/grow.jsonl"
done
for t in "$D"/traces/*.csv.gz; do
  for policy in "" --grow-before-reclaim; do
    echo "$(basename "$t") ${policy:-default} $(timeout 60 "$D/gpumem" replay "$t" --resource gpu-pool $policy --json)" >> "$W/replay.txt"
  done
done

tar czf "$FINAL/speed.tgz" -C "$W" .
[[ -f "$W/gpu_tests.log" ]] && { echo "== GPU tests"; grep -E "PASSED|FAILED|rc=" "$W/gpu_tests.log" | tail -6; }
[[ -f "$W/peers.txt" ]] && { echo "== peers"; tail -32 "$W/peers.txt"; }
echo "== gpumem (default, +grow) and the simulated device"
cat "$W"/default.jsonl "$W/grow.jsonl" 2>/dev/null \
  | grep -o '"pattern":"[^"]*","allocator":"[^"]*".*"\(ns_per_pair\|ns_per_op\|mops_per_s\)":[0-9.]*' \
  | sed 's/"device":"[^"]*",//; s/"//g; s/pattern://; s/allocator://'
echo "== reserved"; sed -E 's/\{.*"fragmentation":([0-9.]+).*"peak_reserved_bytes":([0-9]+).*/frag \1 peak_reserved \2/' "$W/replay.txt"
tail -3 "$W/bench.err"
