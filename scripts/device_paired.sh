#!/usr/bin/env bash
# Paired speed runs on the device: the carried gpumem-base and gpumem take turns ROUNDS times
# (default 5), each `gpumem bench PATTERN --reps 3` with POLICY's flags, so a host whose speed
# drifts over minutes (H200 hosts: up to 2x) slows both alike; compare round by round.
#   here:   .carry/gpu/{gpumem,gpumem-base,traces} as for device_handles.sh
#   device: run(command="bash scripts/device_paired.sh", carry=[".carry/gpu"])
# Env: ROUNDS, PATTERNS (default "replay pair"), POLICY (default --grow-before-reclaim), ORDER (the
#      binaries in the order every round runs them; default: base first in odd rounds, new first in even),
#      ALLOCATOR (default gpumem-gpu; gpumem-sim with POLICY="... --simulate" tries it without a GPU).
set -u
cd "$(dirname "$0")/.."
D=.carry/gpu
W="${OUT:-/tmp/gpumem-paired}/w"
mkdir -p "$W"
for i in $(seq 1 "${ROUNDS:-5}"); do
  # By default the two take turns going first (ABBA...): a host that speeds up or slows down within a
  # round then favours neither (session 20's H100 host sped up under base's half of a round).
  order=${ORDER:-gpumem-base gpumem}
  if [[ -z "${ORDER:-}" && $((i % 2)) -eq 0 ]]; then order="gpumem gpumem-base"; fi
  for bin in $order; do
    for pattern in ${PATTERNS:-replay pair}; do
      timeout 100 "$D/$bin" bench "$pattern" --allocator "${ALLOCATOR:-gpumem-gpu}" --reps 3 --traces "$D/traces" \
        ${POLICY---grow-before-reclaim} --json 2>> "$W/bench.err" \
        | sed "s/\"allocator\":\"${ALLOCATOR:-gpumem-gpu}\"/\"allocator\":\"$bin\",\"round\":$i/" >> "$W/paired.jsonl"
    done
  done
done
# Per figure: each binary's median over the rounds, and the median of the per-round ratios.
python3 - "$W/paired.jsonl" <<'PY'
import collections, json, statistics, sys
runs = collections.defaultdict(dict)
for line in open(sys.argv[1]):
    r = json.loads(line)
    key = (r["pattern"], r.get("trace", "").split("_")[0] or str(r.get("size_bytes") or r.get("threads")))
    value = r.get("ns_per_op") or r.get("ns_per_pair") or r.get("mops_per_s")  # threads: Mops/s, higher is better
    if value:
        runs[key].setdefault(r["round"], {})[r["allocator"]] = value
print(f"{'figure':28}{'base':>10}{'new':>10}{'new/base per round (median)':>30}{'rounds new < base':>20}")
for key, rounds in sorted(runs.items()):
    both = [v for v in rounds.values() if "gpumem-base" in v and "gpumem" in v]
    if not both:
        continue
    base = statistics.median(v["gpumem-base"] for v in both)
    new = statistics.median(v["gpumem"] for v in both)
    ratio = statistics.median(v["gpumem"] / v["gpumem-base"] for v in both)
    lower = sum(v["gpumem"] < v["gpumem-base"] for v in both)
    print(f"{' '.join(key):28}{base:10.1f}{new:10.1f}{ratio:30.3f}{lower:>14} of {len(both)}")
PY
