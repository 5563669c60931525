#!/usr/bin/env bash
# Issue "See it", item 3's proof: a real PyTorch snapshot, converted to gpumem's trace format and
# replayed, peaks at the live bytes PyTorch itself reported.
#
#   scripts/snapshot_check.sh DIR [GPUMEM]
# DIR holds snapshot.pickle and torch_figures.json from integrations/record_snapshot.py (run on the
# GPU machine); GPUMEM is the CLI (default build/gpumem). Writes DIR/trace.csv and DIR/replay.json,
# prints both peaks, exits 0 only when they are equal.
set -euo pipefail
dir=${1:?usage: snapshot_check.sh DIR [GPUMEM]}
gpumem=${2:-build/gpumem}
here=$(cd "$(dirname "$0")/.." && pwd)
python3 "$here/integrations/torch_snapshot_to_csv.py" "$dir/snapshot.pickle" -o "$dir/trace.csv"
"$gpumem" replay "$dir/trace.csv" --resource exact,pool --json >"$dir/replay.json"
python3 - "$dir" <<'PY'
import json, sys
d = sys.argv[1]
torch = json.load(open(f"{d}/torch_figures.json"))
rows = [json.loads(l) for l in open(f"{d}/replay.json") if l.strip()]
exact = next(r for r in rows if r["resource"] == "exact")
pool = next(r for r in rows if r["resource"] == "pool")
got = exact["peak_live_bytes"]
want = torch.get("max_memory_requested", -1)
print(f"rows replayed            {exact['ops']}")
print(f"PyTorch peak requested   {want} B (memory_stats requested_bytes.all.peak)")
print(f"replay peak live         {got} B  -> {'EQUAL' if got == want else f'DIFFERENT by {got - want} B'}")
alloc = torch["max_memory_allocated"]
print(f"PyTorch peak allocated   {alloc} B (max_memory_allocated: its rounded block sizes, "
      f"{100.0 * (alloc - got) / got:+.2f}% over the requested peak), peak reserved {torch['max_memory_reserved']} B")
print(f"gpumem pool (simulated)  peak reserved {pool['peak_reserved_bytes']} B = "
      f"{pool['peak_reserved_bytes'] / got:.3f}x live; PyTorch {torch['max_memory_reserved'] / got:.3f}x")
sys.exit(0 if got == want else 1)
PY
