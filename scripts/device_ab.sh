#!/usr/bin/env bash
# One GPU call (session 23): the GPU suite on this build; builds of gpumem compared on the host's
# CPU in one process (bench/ab, no GPU needed), so the host's changes of speed fall on every build
# alike; gpumem against its base on the GPU (scripts/device_paired.sh); every allocator on every
# pattern in one process (scripts/device_bench.sh). Logs packed under $OUT; a summary printed last.
#   here:   build-carry -> .carry/gpu/{gpumem,gpumem-base,gpumem_gpu_tests,traces};
#           scripts/ab_build.sh .carry/ab/build BASE NEW... ; cp .carry/ab/build/ab .carry/ab/
#   device: run(command="bash scripts/device_ab.sh", carry=[".carry/gpu", ".carry/peer", ".carry/ab/ab"])
# Env: SKIP_TESTS=1, SKIP_PAIRED=1, SKIP_PEERS=1, AB_WINDOWS (default 2000).
set -u
cd "$(dirname "$0")/.."
D=.carry/gpu
FINAL=${OUT:-/tmp/gpumem-ab}
W=$(mktemp -d)
mkdir -p "$FINAL"
{ lscpu | grep -E "Model name|MHz|Thread|Core"; nvidia-smi -L; } > "$W/machine.txt" 2>&1
if [[ -z "${SKIP_TESTS:-}" ]]; then
  GPUMEM_EXAMPLES="$PWD/examples" timeout 150 "$D/gpumem_gpu_tests" > "$W/gpu_tests.log" 2>&1
  echo "gpu tests rc=$?" >> "$W/gpu_tests.log"
fi
T="$D/traces"
timeout 90 .carry/ab/ab --windows "${AB_WINDOWS:-2000}" --layouts 20 pair:512 pair:64K pair:1M pair:16M pair:256M churn \
  > "$W/ab_pair.txt" 2>&1
timeout 90 .carry/ab/ab --windows 400 --layouts 20 replay:$T/bert_infer_varlen.csv.gz replay:$T/resnet50_train.csv.gz \
  replay:$T/llama_serve.csv.gz > "$W/ab_replay.txt" 2>&1
if [[ -z "${SKIP_PAIRED:-}" ]]; then
  OUT="$W/paired" PATTERNS=pair ROUNDS=4 timeout 120 bash scripts/device_paired.sh > "$W/paired.txt" 2>&1
fi
if [[ -z "${SKIP_PEERS:-}" ]]; then
  OUT="$W/peers" GPUMEM_DIST="$D" GPUMEM_TRACES="$T" PEER_LIB=.carry/peer/libgpumem_torch_peer.so REPS=3 ROUNDS=2 \
    BENCH_FLAGS=--grow-before-reclaim timeout 240 bash scripts/device_bench.sh > "$W/peers.txt" 2>&1
fi
tar czf "$FINAL/ab.tgz" -C "$W" .
cat "$W/machine.txt"
[[ -f "$W/gpu_tests.log" ]] && grep -E "PASSED|FAILED|rc=" "$W/gpu_tests.log" | tail -6
cat "$W/ab_pair.txt" "$W/ab_replay.txt"
[[ -f "$W/paired.txt" ]] && tail -12 "$W/paired.txt"
[[ -f "$W/peers.txt" ]] && tail -30 "$W/peers.txt"
