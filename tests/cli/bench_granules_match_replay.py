"""`gpumem bench replay`'s granule figures are the pool's own, pass by pass: on a trace, the first
pass's driver granules and the busiest warm pass's are what `gpumem replay --passes N` logs (its
pass_log counts from the start: a pass's own figure is a difference), and the peak in granules is
replay's peak reserved over the 2 MiB granule. The goal lines are computed from those rows.
Usage: python3 bench_granules_match_replay.py GPUMEM TRACE"""
import json
import subprocess
import sys

cli, trace = sys.argv[1], sys.argv[2]
passes = 4
bench = [json.loads(line) for line in subprocess.run(
    [cli, "bench", "replay", "--simulate", "--reps", "1", "--allocator", "gpumem-sim", "--passes", str(passes),
     "--traces", trace, "--json"], check=True, capture_output=True, text=True).stdout.splitlines()]
replay = json.loads(subprocess.run([cli, "replay", trace, "--passes", str(passes), "--json"], check=True,
                                   capture_output=True, text=True).stdout)
cold = next(r for r in bench if r["pattern"] == "replay")
warm = next(r for r in bench if r["pattern"] == "replay-warm")
goals = {g["goal"]: g for g in bench if g["pattern"] == "goal"}
log = [p["driver_granules"] for p in replay["pass_log"]]
per_pass = [log[0]] + [b - a for a, b in zip(log, log[1:])]
granule = 2 << 20
expect = {
    "first pass driver granules": (cold["driver_granules"], per_pass[0]),
    "busiest warm pass": (warm["driver_granules"], max(per_pass[1:])),
    "warm passes": (warm["passes"], passes - 1),
    "peak granules": (warm["peak_granules"], -(-replay["peak_reserved_bytes"] // granule)),
    "first pass maps <= its granules": (cold["driver_maps"] <= cold["driver_granules"], True),
    "warm goal": (round(goals["warm_granules"]["value"], 3),
                  round(100 * warm["driver_granules"] / warm["peak_granules"], 3)),
    "first-pass goal": (round(goals["first_pass_granules"]["value"], 3),
                        round(cold["driver_maps"] / cold["peak_granules"], 3)),
    "reserve goal": (goals["reserve"]["value"], warm["peak_reserved_over_live"]),
}
bad = {k: v for k, v in expect.items() if v[0] != v[1]}
for k, (got, want) in expect.items():
    print(f"{k}: bench {got}, expected {want}{'' if got == want else '  <-- differs'}")
if per_pass[0] == 0:
    bad["trace"] = "the trace moves no granule: pick one that does"
    print("the trace moves no granule: the check would prove nothing")
sys.exit(1 if bad else 0)
