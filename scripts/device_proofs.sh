#!/usr/bin/env bash
# One short GPU call that proves what only the H200 can (session 2's device time was ~4 minutes):
#   1. a real PyTorch snapshot, converted and replayed, peaks at PyTorch's max_memory_allocated;
#   2. the soak: the serving trace on gpu-pool for >= 10^8 operations with integrity checks;
#   3. the GPU tests of the pool, the soak and the cross-stream proof;
#   4. gpumem's own speed figures (the peers were measured before; see bench/RESULTS.md).
# Binaries are built here and carried in one folder with the traces:
#   device: run(command="bash scripts/device_proofs.sh .carry/gpu", carry=[".carry/gpu"])
# Each step has its own timeout so one slow step cannot eat the others' time; logs under $OUT.
set -u
D=$(cd "${1:-.carry/gpu}" && pwd)
HERE=$(cd "$(dirname "$0")/.." && pwd)
O=${OUT:-/tmp/gpumem-out}
mkdir -p "$O/snap"
nvidia-smi -L > "$O/smi.log" 2>&1
SOAK_OPS=${SOAK_OPS:-100000000}

echo "== snapshot" | tee "$O/snapshot.log"
timeout 40 python3 "$HERE/integrations/record_snapshot.py" -o "$O/snap" >> "$O/snapshot.log" 2>&1
echo "record rc=$?" >> "$O/snapshot.log"
timeout 15 bash "$HERE/scripts/snapshot_check.sh" "$O/snap" "$D/gpumem" >> "$O/snapshot.log" 2>&1
echo "check rc=$?" >> "$O/snapshot.log"

echo "== soak" > "$O/soak.log"
timeout ${SOAK_TIMEOUT:-70} "$D/gpumem" replay "$D/traces/llama_serve.csv.gz" --resource gpu-pool --ops "$SOAK_OPS" \
  --verify-every 256 --json > "$O/soak.json" 2>> "$O/soak.log"
echo "soak rc=$?" >> "$O/soak.log"

GPUMEM_EXAMPLES="$HERE/examples" timeout 45 "$D/gpumem_gpu_tests" \
  --gtest_filter="${GPU_FILTER:-replay_soak_gpu.*:PoolOnGpu*:VmmUpstream*:CrossStreamSafety*:GpuPool*}" \
  > "$O/gpu_tests.log" 2>&1
echo "rc=$?" >> "$O/gpu_tests.log"

timeout 30 "$D/gpumem" bench all --allocator gpumem-gpu --reps 3 --traces "$D/traces" --json \
  > "$O/bench.jsonl" 2> "$O/bench.err"
echo "bench rc=$?" >> "$O/bench.err"

echo "== summary"
tail -6 "$O/snapshot.log"
cat "$O/soak.log"
python3 - "$O/soak.json" <<'PY'
import json, sys
try:
    r = json.loads(open(sys.argv[1]).read())
except Exception as e:
    print("soak: no result:", e); sys.exit(0)
print({k: r.get(k) for k in ("ops", "passes", "ns_per_op", "overlaps", "misaligned", "mismatched_words",
                             "verified_blocks", "soak_growth", "fragmentation",
                             "granules_mapped_unmapped_per_1000_ops")})
log = r.get("pass_log", [])
for p in log[:3] + log[3::max(1, len(log) // 12)]:
    print("  pass", p["pass"], "peak reserved MiB", p["peak_reserved_bytes"] >> 20, "granules", p.get("granules_moved"),
          "s %.1f" % p.get("seconds", 0))
PY
grep -E "tests ran|PASSED|FAILED|rc=" "$O/gpu_tests.log" | tail -8
tail -1 "$O/bench.err"
python3 -c "
import json
for l in open('$O/bench.jsonl'):
    if not l.startswith('{'): continue
    r=json.loads(l); k=[x for x in ('ns_per_pair','ns_per_op','mops_per_s') if x in r]
    print(r['pattern'], r.get('size_bytes',r.get('threads',r.get('trace',''))), r['allocator'], k and round(r[k[0]],1), r.get('error',''))
"
