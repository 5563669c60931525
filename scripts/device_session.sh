#!/usr/bin/env bash
# Everything one GPU call of a session runs, with its logs packed into one file (the device tool
# brings back at most 8 files): the proofs (snapshot, soak, GPU tests, gpumem's speed), the VMM
# handle-size experiments (driver-call cost, streaming bandwidth), gpumem's churn at a few idle budgets, then the PyTorch/CuPy models with
# gpumem variants.
#   device: run(command="bash scripts/device_session.sh", carry=[".carry/gpu", ".carry/torch"])
# Env: VARIANTS (bench_models' gpumem variants), BUDGETS (idle budgets for the churn), SKIP_TORCH=1.
set -u
cd "$(dirname "$0")/.."
FINAL=${OUT:-/tmp/gpumem-session}
W=$(mktemp -d)
mkdir -p "$W/proofs" "$W/torch" "$FINAL"

OUT="$W/proofs" bash scripts/device_proofs.sh .carry/gpu > "$W/proofs.txt" 2>&1

echo "== vmm handle size" > "$W/vmm.txt"
timeout 30 .carry/gpu/vmm_handle_size >> "$W/vmm.txt" 2>&1
# Streaming bandwidth by physical handle size (bench/tools/vmm_bandwidth.cu, built with nvcc here).
echo "== vmm bandwidth" >> "$W/vmm.txt"
timeout 60 .carry/gpu/vmm_bandwidth >> "$W/vmm.txt" 2>&1

echo "== churn by idle budget" > "$W/churn.txt"
for b in ${BUDGETS:-0.1 0.25 1000000}; do
  echo "idle_budget $b" >> "$W/churn.txt"
  timeout 40 .carry/gpu/gpumem bench churn --allocator gpumem-gpu --reps 3 --idle-budget "$b" --json >> "$W/churn.txt" 2>&1
done

if [[ -z "${SKIP_TORCH:-}" ]]; then
  OUT="$W/torch" timeout ${TORCH_TIMEOUT:-400} bash scripts/device_torch.sh > "$W/torch.txt" 2>&1
fi

tar czf "$FINAL/session.tgz" -C "$W" .
cat "$W/proofs.txt" | tail -45
cat "$W/vmm.txt" "$W/churn.txt"
tail -30 "$W/torch.txt" 2>/dev/null
