#!/usr/bin/env bash
# Does the company gpumem keeps in a process change its replay speed? gpumem-gpu's replays
# (growing first) timed in three kinds of process, taking turns over ROUNDS rounds (order
# reversed every other round), the host's figure taken before each: `alone` (bench replay, gpumem
# only: as scripts/device_paired.sh runs it), `after-patterns` (bench all, gpumem only: pair,
# churn and 16 threads run first), `with-peers` (bench replay with cudaMallocAsync, CUB and
# PyTorch's caching allocator taking turns beside it: as scripts/device_bench.sh runs it, less
# cudaMalloc, whose replays take minutes). Session 22 saw bert's warm pass at 28-29 ns alone and
# 49.6-49.9 with the peers on one H100 host, and no such gap on another.
#   device: run(command="bash scripts/device_replay_company.sh", carry=[".carry/gpu", ".carry/peer"])
#   (.carry/gpu as for device_paired.sh; .carry/peer/libgpumem_torch_peer.so from device_bench.sh's $OUT)
# Env: ROUNDS (default 4), PEER_LIB (default .carry/peer/libgpumem_torch_peer.so; missing: no PyTorch).
set -u
cd "$(dirname "$0")/.."
G=.carry/gpu/gpumem
T=.carry/gpu/traces
P=${PEER_LIB:-.carry/peer/libgpumem_torch_peer.so}
torch=()
[[ -f $P ]] && torch=(torch-caching --peer-lib "$P")
nvidia-smi -L 2>/dev/null || true
run() {  # run KIND [bench flags...]
  case $1 in
    alone) timeout 200 "$G" bench replay --no-auto-peers --allocator gpumem-gpu "${@:2}" ;;
    after-patterns) timeout 200 "$G" bench all --no-auto-peers --allocator gpumem-gpu "${@:2}" ;;
    with-peers) timeout 200 "$G" bench replay --no-auto-peers --allocator gpumem-gpu cuda-malloc-async cub-caching "${torch[@]}" "${@:2}" ;;
  esac
}
kinds=(alone after-patterns with-peers)
for r in $(seq 1 "${ROUNDS:-4}"); do
  order=("${kinds[@]}")
  (( r % 2 == 0 )) && order=(with-peers after-patterns alone)
  for k in "${order[@]}"; do
    h=$("$G" bench pair --simulate --allocator gpumem-sim --reps 1 --json 2>/dev/null | head -1 |
      python3 -c "import sys,json; print(round(json.loads(sys.stdin.readline())['ns_per_pair'],1))")
    run "$k" --grow-before-reclaim --reps 3 --traces "$T" --json 2>/dev/null | python3 -c "
import sys, json
out = []
for line in sys.stdin:
    j = json.loads(line)
    if j['allocator'] == 'gpumem-gpu' and j['pattern'] == 'replay-warm':
        out.append(j['trace'].split('_')[0] + ' ' + format(j['ns_per_op'], '.1f'))
print('round $r host $h $k: warm', ' | '.join(out))"
  done
done
