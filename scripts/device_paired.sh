#!/usr/bin/env bash
# Paired speed runs on the device: the carried gpumem-base and gpumem take turns ROUNDS times
# (default 5), each `gpumem bench PATTERN --reps 3` with POLICY's flags, so a host whose speed
# drifts over minutes (H200 hosts: up to 2x) slows both alike; compare round by round.
#   here:   .carry/gpu/{gpumem,gpumem-base,traces} as for device_handles.sh
#   device: run(command="bash scripts/device_paired.sh", carry=[".carry/gpu"])
# Env: ROUNDS, PATTERNS (default "replay pair"), POLICY (default --grow-before-reclaim), ORDER (the
#      binaries in the order every round runs them; default: base first in odd rounds, new first in even),
#      ALLOCATOR (default gpumem-gpu; gpumem-sim with POLICY="... --simulate" tries it without a GPU),
#      PIN (a CPU list for taskset: every run on those cores; it does not hold the host's speed).
# Before every run the host's speed is taken: base's simulated 512 B alloc+free pair (0.2 s, no GPU),
# the same instructions every time, so it moves only with the host. Session 21's H200 host switched
# between two speeds ~1.8x apart within seconds; each figure's ratio is then also given over the two
# runs' host figures ("host-adjusted"), which takes out what the host did between them.
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
      ${PIN:+taskset -c "$PIN"} "$D/gpumem-base" bench pair --simulate --allocator gpumem-sim --reps 1 --json 2>> "$W/bench.err" \
        | head -1 | sed "s/\"pattern\":\"pair\",\"allocator\":\"gpumem-sim\"/\"pattern\":\"host\",\"before\":\"$pattern\",\"allocator\":\"$bin\",\"round\":$i/" \
        >> "$W/paired.jsonl"
      ${PIN:+taskset -c "$PIN"} timeout 100 "$D/$bin" bench "$pattern" --allocator "${ALLOCATOR:-gpumem-gpu}" --reps 3 --traces "$D/traces" \
        ${POLICY---grow-before-reclaim} --json 2>> "$W/bench.err" \
        | sed "s/\"allocator\":\"${ALLOCATOR:-gpumem-gpu}\"/\"allocator\":\"$bin\",\"round\":$i/" >> "$W/paired.jsonl"
    done
  done
done
# Per figure: each binary's median over the rounds, and the median of the per-round ratios.
python3 - "$W/paired.jsonl" <<'PY'
import collections, json, statistics, sys
runs = collections.defaultdict(dict)
host = {}  # (round, binary, pattern) -> the host's figure taken just before that run
for line in open(sys.argv[1]):
    r = json.loads(line)
    if r["pattern"] == "host":
        host[(r["round"], r["allocator"], r["before"])] = r["ns_per_pair"]
        continue
    key = (r["pattern"], r.get("trace", "").split("_")[0] or str(r.get("size_bytes") or r.get("threads")))
    value = r.get("ns_per_op") or r.get("ns_per_pair") or r.get("mops_per_s")  # threads: Mops/s, higher is better
    if value:
        runs[key].setdefault(r["round"], {})[r["allocator"]] = value
        runs[key][r["round"]]["host " + r["allocator"]] = host.get((r["round"], r["allocator"], r["pattern"].split("-")[0]))
print(f"{'figure':28}{'base':>10}{'new':>10}{'new/base per round (median)':>30}{'rounds new < base':>20}{'host-adjusted':>15}")
for key, rounds in sorted(runs.items()):
    both = [v for v in rounds.values() if "gpumem-base" in v and "gpumem" in v]
    if not both:
        continue
    base = statistics.median(v["gpumem-base"] for v in both)
    new = statistics.median(v["gpumem"] for v in both)
    ratio = statistics.median(v["gpumem"] / v["gpumem-base"] for v in both)
    lower = sum(v["gpumem"] < v["gpumem-base"] for v in both)
    # The ratio with each run's figure divided by the host's just before it (threads: multiplied).
    timed = [v for v in both if v.get("host gpumem") and v.get("host gpumem-base")]
    adjusted = statistics.median(
        (v["gpumem"] / v["gpumem-base"]) * ((v["host gpumem-base"] / v["host gpumem"]) ** (-1 if key[0] == "threads" else 1))
        for v in timed) if timed else float("nan")
    print(f"{' '.join(key):28}{base:10.1f}{new:10.1f}{ratio:30.3f}{lower:>14} of {len(both)}{adjusted:15.3f}")
# The host's speed before each run, in round order: how much it moved.
for (rnd, binary, pattern), ns in sorted(host.items()):
    print(f"host round {rnd} before {binary} {pattern}: {ns:.1f} ns per simulated pair")
PY
