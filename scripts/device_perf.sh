#!/usr/bin/env bash
# Where the host time of a warm replay goes on the GPU machine's CPU: `perf record` (the software
# clock: the device hosts are virtual machines, and a VM here counted no cycles or instructions)
# over many passes of each trace through gpumem's GPU pool, growing first, with `--host-probe`
# after every pass, so each pass's time can be read beside the host's speed just then. The GPU
# machine has no perf, so this machine's is carried with its libraries and its own loader:
#   here:   cmake --build build-carry && bash scripts/device_perf.sh stage   # -> .carry/perf/
#   device: run(command="bash scripts/device_perf.sh", carry=[".carry/perf", ".carry/gpu"])
# (.carry/gpu/traces as for device_replay_passes.sh). `stage` copies the unstripped gpumem of
# BUILD (default build-carry), whose symbol table names the functions perf samples.
# Session 30 ran it here only (RES=pool): no device time was left to run it on a device host.
# Env: OUT (default ./perf-out), PASSES (default 1000), TRACES (default bert_infer_varlen
# resnet50_train), RES (default gpu-pool; `pool` tries the script on the simulated device).
set -u
cd "$(dirname "$0")/.."
D=.carry/perf
if [[ "${1:-}" == stage ]]; then
  set -e
  rm -rf "$D" && mkdir -p "$D/lib"
  cp "$(command -v perf)" "$D/perf"
  for l in $(ldd "$D/perf" | awk '$3 ~ /^\// {print $3}'); do cp -L "$l" "$D/lib/"; done
  cp -L /lib64/ld-linux-x86-64.so.2 "$D/"
  cp "${BUILD:-build-carry}/gpumem" "$D/gpumem-sym"
  du -sh "$D"
  exit 0
fi
F=${OUT:-$PWD/perf-out}
mkdir -p "$F"
P=("$D/ld-linux-x86-64.so.2" --library-path "$D/lib" "$D/perf")
G=$D/gpumem-sym
T=.carry/gpu/traces
traces=${TRACES:-bert_infer_varlen resnet50_train}
{ lscpu | grep -E "Model name|^CPU\(s\)|Hypervisor"; nvidia-smi -L; } > "$F/machine.txt" 2>&1
# Whether this VM counts cycles and instructions at all.
"${P[@]}" stat -e task-clock,cycles,instructions "$G" bench pair --simulate --reps 1 > "$F/stat.txt" 2>&1
for t in $traces; do
  timeout 120 "${P[@]}" record -e cpu-clock -F 10000 -o "$F/$t.data" -- "$G" replay "$T/$t.csv.gz" \
    --resource "${RES:-gpu-pool}" --passes "${PASSES:-1000}" --grow-before-reclaim --host-probe --json \
    > "$F/$t.json" 2> "$F/$t.err"
  "${P[@]}" report -i "$F/$t.data" --stdio --no-children --sort dso > "$F/$t.dso.txt" 2>/dev/null
  "${P[@]}" report -i "$F/$t.data" --stdio --no-children --sort sym --percent-limit 0.3 > "$F/$t.sym.txt" 2>/dev/null
  rm -f "$F/$t.data"
done
cat "$F/machine.txt"
grep -E "task-clock|cycles|instructions" "$F/stat.txt"
for t in $traces; do
  echo "== $t"
  python3 - "$F/$t.json" <<'PY'
import json, statistics as st, sys
lines = open(sys.argv[1]).read().strip().splitlines()
if not lines:
    sys.exit("no replay output (see the .err file)")
d = json.loads(lines[0])
log = d["pass_log"]
ops = d["ops"] / d["passes"]
# The log's seconds and granule counts are running totals: a pass's own is the difference.
warm = [((b["seconds"] - a["seconds"]) * 1e9 / ops, b.get("host_probe_ns")) for a, b in zip(log, log[1:])]
ns = [x for x, _ in warm]
print(f"passes {len(log)}: ns per op after the first, median {st.median(ns):.1f} (min {min(ns):.1f}, max {max(ns):.1f})")
probes = [h for _, h in warm if h]
if probes:
    m = st.median(probes)
    fast = [x for x, h in warm if h and h < m]
    slow = [x for x, h in warm if h and h >= m]
    print(f"host probe median {m:.1f} ns (range {min(probes):.1f}-{max(probes):.1f}); passes with the probe under "
          f"it {st.median(fast):.1f} ns per op, over it {st.median(slow):.1f}")
moved = [p.get("granules_moved", 0) for p in log]
print("granules moved by pass 2, 3, 4:", [b - a for a, b in zip(moved, moved[1:])][:3])
PY
  grep -v "^#" "$F/$t.dso.txt" | grep -v "^$" | head -6
  grep -v "^#" "$F/$t.sym.txt" | grep -v "^$" | head -28 | cut -c1-130
done
