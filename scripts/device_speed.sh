#!/usr/bin/env bash
# One GPU call for the Speed issue's open figures (session 4): the GPU tests, then gpumem's
# patterns under both reclaim policies (the default, tight, and --grow-before-reclaim) with every
# peer on the threads pattern, and each shared trace replayed on the GPU pool under both policies
# (peak reserved / peak live). Logs packed into one file under $OUT.
#   here:   cmake --build build-carry && copy gpumem, gpumem_gpu_tests and the traces to .carry/gpu
#   device: run(command="bash scripts/device_speed.sh", carry=[".carry/gpu"])
set -u
cd "$(dirname "$0")/.."
D=.carry/gpu
FINAL=${OUT:-/tmp/gpumem-speed}
W=$(mktemp -d)
mkdir -p "$FINAL"
REPS=${REPS:-3}

GPUMEM_EXAMPLES="$PWD/examples" timeout ${TEST_TIMEOUT:-90} "$D/gpumem_gpu_tests" > "$W/gpu_tests.log" 2>&1
echo "gpu tests rc=$?" >> "$W/gpu_tests.log"

# Threads: every allocator, default policy; then gpumem with --grow-before-reclaim.
timeout 120 "$D/gpumem" bench threads --reps "$REPS" --json > "$W/threads.jsonl" 2> "$W/bench.err"
timeout 60 "$D/gpumem" bench threads --allocator gpumem-gpu --reps "$REPS" --grow-before-reclaim --json \
  | sed 's/"allocator":"gpumem-gpu"/"allocator":"gpumem-gpu+grow"/' >> "$W/threads.jsonl" 2>> "$W/bench.err"
# The same on the simulated device (the host's cores, no driver calls), both policies.
for policy in "" --grow-before-reclaim; do
  timeout 60 "$D/gpumem" bench threads --simulate --allocator gpumem-sim --reps "$REPS" $policy --json \
    | sed "s/\"allocator\":\"gpumem-sim\"/\"allocator\":\"gpumem-sim${policy:+ +grow}\"/; s/ +grow/+grow/" >> "$W/threads.jsonl" 2>> "$W/bench.err"
done
# Pair, churn, replay: gpumem under both policies.
for policy in "" --grow-before-reclaim; do
  tag=${policy:+ +grow}
  timeout 120 "$D/gpumem" bench all --allocator gpumem-gpu --reps "$REPS" --traces "$D/traces" $policy --json \
    | grep -v '"pattern":"threads"' | sed "s/\"allocator\":\"gpumem-gpu\"/\"allocator\":\"gpumem-gpu${tag// /}\"/" \
    >> "$W/gpumem.jsonl" 2>> "$W/bench.err"
done
# Reserved on the GPU under both policies.
for t in "$D"/traces/*.csv.gz; do
  for policy in "" --grow-before-reclaim; do
    echo "$(basename "$t") ${policy:-default} $(timeout 60 "$D/gpumem" replay "$t" --resource gpu-pool $policy --json)" >> "$W/replay.txt"
  done
done

tar czf "$FINAL/speed.tgz" -C "$W" .
echo "== GPU tests"; grep -E "PASSED|FAILED|rc=" "$W/gpu_tests.log" | tail -8
echo "== threads (Mops/s)"; grep -o '"allocator":"[^"]*","device":"[^"]*","threads":[0-9]*,"mops_per_s":[0-9.]*' "$W/threads.jsonl" | sed 's/"device":"[^"]*",//; s/"//g'
echo "== gpumem pair / churn / replay"; grep -o '"pattern":"[^"]*","allocator":"[^"]*".*"\(ns_per_pair\|ns_per_op\)":[0-9.]*' "$W/gpumem.jsonl" | sed 's/"device":"[^"]*",//; s/"//g'
echo "== reserved"; sed -E 's/\{.*"fragmentation":([0-9.]+).*"peak_reserved_bytes":([0-9]+).*/frag \1 peak_reserved \2/' "$W/replay.txt"
tail -3 "$W/bench.err"
