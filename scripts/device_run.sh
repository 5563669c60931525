#!/bin/bash
# The GPU run, on the device machine, over binaries built here and carried in one folder:
#   scripts/device_run.sh DIR   (DIR holds gpumem and gpumem_gpu_tests; logs go to $OUT)
# Steps: device facts, `gpumem info`, the GPU suite, the integrity stress, compute-sanitizer
# memcheck and racecheck, the memory-hierarchy bench. The allocator bench is scripts/device_bench.sh.
set -u
D=$(cd "${1:-.}" && pwd)
O=${OUT:-/tmp/gpumem-out}
mkdir -p "$O"
cd "$D"
{ nvidia-smi -L; nvidia-smi --query-gpu=driver_version,memory.total --format=csv; } > "$O/smi.log" 2>&1
timeout 20 ./gpumem info > "$O/info.txt" 2>&1; echo "info rc=$?" >> "$O/info.txt"
timeout 20 ./gpumem info --json > "$O/info.json" 2>&1
timeout 90 ./gpumem_gpu_tests --gtest_filter='-IntegrityStress.*' > "$O/gpu_tests.log" 2>&1; echo "rc=$?" >> "$O/gpu_tests.log"
timeout 100 ./gpumem_gpu_tests --gtest_filter='IntegrityStress.*' > "$O/stress.log" 2>&1; echo "rc=$?" >> "$O/stress.log"
CS=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
GPUMEM_STRESS_BLOCKS=20000 timeout 70 "$CS" --tool memcheck --leak-check full ./gpumem_gpu_tests \
  --gtest_filter='IntegrityStress.VmmUpstream*:PoolOnGpu/2.*:CudaOrdering.*' > "$O/sanitizer.log" 2>&1
echo "memcheck rc=$?" >> "$O/sanitizer.log"
GPUMEM_STRESS_BLOCKS=2000 timeout 45 "$CS" --tool racecheck ./gpumem_gpu_tests \
  --gtest_filter='IntegrityStress.VmmUpstream*:PoolOnGpu/2.*' >> "$O/sanitizer.log" 2>&1
echo "racecheck rc=$?" >> "$O/sanitizer.log"
timeout 30 ./gpumem bench-hierarchy > "$O/hierarchy.txt" 2>&1; echo "rc=$?" >> "$O/hierarchy.txt"
# Fragmentation on the GPU: the shared traces (carried beside the binaries) through gpumem's pool and
# through cudaMallocAsync, as each counts its own reserved memory.
if [ -d traces ]; then
  timeout 60 ./gpumem replay traces/*.csv.gz --resource gpu-pool,cuda-malloc-async --json > "$O/replay_gpu.jsonl" 2>&1
  echo "replay rc=$?" >> "$O/replay_gpu.jsonl"
fi
# The allocator bench against the peers in this process (BENCH=1): gpumem, cudaMalloc,
# cudaMallocAsync, CUB.
if [ "${BENCH:-0}" = 1 ]; then
  timeout 130 ./gpumem bench all --json --reps 3 ${GPUMEM_TRACES:+--traces "$GPUMEM_TRACES"} > "$O/bench.jsonl" 2> "$O/bench.err"
  echo "bench rc=$?" >> "$O/bench.err"
fi
echo "== summary"
grep -E "tests ran|PASSED|FAILED" "$O/gpu_tests.log" | tail -4
grep -E "stress\]|PASSED|FAILED" "$O/stress.log" | tail -6
grep -E "ERROR SUMMARY|RACECHECK SUMMARY|rc=" "$O/sanitizer.log"
tail -25 "$O/hierarchy.txt"
head -30 "$O/info.txt"
cat "$O/replay_gpu.jsonl" 2>/dev/null
[ -s "$O/bench.jsonl" ] && python3 -c "
import json,sys
for l in open('$O/bench.jsonl'):
    if not l.startswith('{'): continue
    r=json.loads(l); k=[x for x in ('ns_per_pair','ns_per_op','mops_per_s') if x in r]
    print(r['pattern'], r.get('size_bytes',r.get('threads',r.get('trace',''))), r['allocator'], k and round(r[k[0]],1), r.get('error',''))
"
