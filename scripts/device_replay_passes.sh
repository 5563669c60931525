#!/usr/bin/env bash
# Host time of every pass when gpumem's GPU pool replays each shared trace many times (growing
# first), with the host's speed taken before each replay: shows whether the one warm pass `gpumem
# bench` times stands for the passes after it, and how fast the host's speed moves (session 22: an
# H100 host's bert passes went 44.9 -> 26.1 ns/op within 12 passes, ~15 ms).
#   device: run(command="bash scripts/device_replay_passes.sh", carry=[".carry/gpu"])
#   (.carry/gpu/gpumem built as for device_paired.sh; traces in .carry/gpu/traces)
# Each pass is followed (outside the clock) by `--host-probe`: the same simulated pair timed for
# ~0.1 ms in the replaying process, so a slow pass shows whether the host ran slow just then
# (needs a gpumem with `replay --host-probe`, session 25 on; older builds refuse the flag).
# Env: ROUNDS (default 3), PASSES (default 12), POLICY (default --grow-before-reclaim).
set -u
cd "$(dirname "$0")/.."
G=.carry/gpu/gpumem
T=.carry/gpu/traces
nvidia-smi -L 2>/dev/null || true
for r in $(seq 1 "${ROUNDS:-3}"); do
  for t in bert_infer_varlen resnet50_train llama_serve; do
    # The host's figure: the simulated 512 B alloc+free pair, the same instructions every time.
    h=$("$G" bench pair --simulate --allocator gpumem-sim --reps 1 --json 2>/dev/null | head -1 |
      python3 -c "import sys,json; print(round(json.loads(sys.stdin.readline())['ns_per_pair'],1))")
    # shellcheck disable=SC2086  # POLICY is a list of flags
    timeout 60 "$G" replay "$T/$t.csv.gz" --resource gpu-pool --passes "${PASSES:-12}" --host-probe ${POLICY---grow-before-reclaim} --json \
      2>/dev/null | python3 -c "
import sys, json
j = json.loads(sys.stdin.readline())
n = j['ops'] / j['passes']
log = j['pass_log']  # cumulative seconds and granules: one pass each is the difference
secs = [log[0]['seconds']] + [log[i]['seconds'] - log[i - 1]['seconds'] for i in range(1, len(log))]
moved = [log[0]['granules_moved']] + [log[i]['granules_moved'] - log[i - 1]['granules_moved'] for i in range(1, len(log))]
probe = [p.get('host_probe_ns', 0) for p in log]
print('round $r host $h ns/pair, $t: ns/op by pass', ' '.join(f'{s * 1e9 / n:.1f}' for s in secs),
      '| host ns/pair after each pass', ' '.join(f'{p:.1f}' for p in probe),
      '| granules moved by pass', ' '.join(map(str, moved)))"
  done
done
