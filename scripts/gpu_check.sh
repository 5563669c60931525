#!/usr/bin/env bash
# The checks only a GPU can run, and the default's benchmarks: the GPU suite, compute-sanitizer
# (memcheck, racecheck) over its fast tests, `gpumem info`, `gpumem bench all --json-out` against the
# peers, the live models of integrations/bench_models.py against PyTorch's allocator, then two tables
# last: every step's result, and the default's goals (issue 41) with their figures.
#
#   scripts/gpu_check.sh [--build DIR | --bin DIR] [--out DIR] [--traces DIR] [--reps N] [--python PY]
#                        [--budget S] [--no-gpu]
#   scripts/gpu_check.sh --stage DIR [--build DIR]
#
# --build DIR  build gpumem, gpumem_gpu_tests and the PyTorch adaptor in DIR (default build; configured
#              when empty, which needs the Debian dev packages) and run the GPU suite through CTest.
# --bin DIR    take prebuilt binaries from DIR (gpumem, gpumem_gpu_tests, libgpumem_torch.so,
#              libgpumem_pluggable_probe.so, and traces/ if there): for a GPU machine without the dev
#              packages. Nothing is configured or installed; no network.
# --stage DIR  (on the build machine) build as --build does and copy those binaries and the shared
#              traces into DIR. They carry the CUDA runtime statically and run on any driver for sm_90.
# --out DIR    logs, info.json, bench.jsonl and models.jsonl (default gpu-check-out); --traces: traces
#              for the bench's replay (default DIR/traces with --bin, else gpumem's own default).
# --python PY  the Python that has PyTorch (default python3); --reps N: bench's timed runs (default 3).
# --budget S   the whole run's wall time (default 540): a step gets at most what is left, one that
#              cannot start in time is skipped, and the tables always come last.
# --no-gpu     on a machine without a GPU: only `gpumem bench all --simulate` and the goals table
#              (the simulated figures), to check the script and the tables.
# Each step runs under its own limit, all within --budget: gpumem info 60 s, the GPU suite 240 s,
# memcheck and racecheck 150 s each, the PyTorch peer's build 120 s, gpumem bench all 180 s,
# bench_models its --budget-s (MODELS_BUDGET_S, 150) + 90 s, the snapshot replayed 120 s; the
# sanitizers run after the benchmarks, on what is left.
# Env: MEMCHECK_FILTER, RACECHECK_FILTER (gtest filters), MEMCHECK_BLOCKS, RACECHECK_BLOCKS
# (GPUMEM_STRESS_BLOCKS under each tool), SKIP_BENCH=1, SKIP_MODELS=1, SKIP_SANITIZERS=1, SKIP_TORCH=1
# (no PyTorch steps), MODELS_BUDGET_S (bench_models' --budget-s). Exit 0 only when every step that ran
# passed (goals not met included: they are figures, in the last table).
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build="" bin="" stage="" out=gpu-check-out traces="" reps=3 py=python3 budget=540 no_gpu=""
while (($#)); do
  case $1 in
    --build) build=${2:?--build needs a folder}; shift 2 ;;
    --bin) bin=${2:?--bin needs a folder}; shift 2 ;;
    --stage) stage=${2:?--stage needs a folder}; shift 2 ;;
    --out) out=${2:?--out needs a folder}; shift 2 ;;
    --traces) traces=${2:?--traces needs a folder}; shift 2 ;;
    --reps) reps=${2:?--reps needs a count}; shift 2 ;;
    --python) py=${2:?--python needs a program}; shift 2 ;;
    --budget) budget=${2:?--budget needs seconds}; shift 2 ;;
    --no-gpu) no_gpu=1; shift ;;
    -h|--help) sed -n '2,32p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "gpu_check.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
if [[ -n $bin && -n $build ]]; then
  echo "gpu_check.sh: --bin and --build exclude each other" >&2; exit 2
fi
[[ $budget =~ ^[0-9]+$ ]] || { echo "gpu_check.sh: --budget $budget: a whole number of seconds was expected" >&2; exit 2; }
[[ $reps =~ ^[1-9][0-9]*$ ]] || { echo "gpu_check.sh: --reps $reps: a count >= 1 was expected" >&2; exit 2; }

# build DIR: configure when new, then build only what the checks run.
build_here() {
  local dir=$1
  [[ -x /usr/local/cuda/bin/nvcc ]] && export PATH="/usr/local/cuda/bin:$PATH"
  if [[ ! -f $dir/CMakeCache.txt ]]; then
    cmake -S "$root" -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGPUMEM_WITH_CUDA=ON \
      -DGPUMEM_BUILD_TESTS=ON -DGPUMEM_BUILD_BENCH=OFF -DCMAKE_CUDA_ARCHITECTURES=90 >/dev/null || {
      echo "gpu_check.sh: configuring $dir failed; on a machine without the dev packages, build" \
           "elsewhere with --stage DIR and pass --bin DIR here" >&2
      return 1
    }
  fi
  cmake --build "$dir" -j"$(nproc)" --target gpumem_cli gpumem_gpu_tests gpumem_torch gpumem_pluggable_probe
}

if [[ -n $stage ]]; then
  build=${build:-build}
  build_here "$build" || exit 1
  mkdir -p "$stage"
  cp "$build/gpumem" "$build/tests/gpumem_gpu_tests" "$build/integrations/libgpumem_torch.so" \
    "$build/integrations/libgpumem_pluggable_probe.so" "$stage/"
  for t in "$root/shared/traces" "$root/../shared/traces"; do
    if [[ -d $t ]]; then mkdir -p "$stage/traces" && cp "$t"/*.csv* "$stage/traces/"; break; fi
  done
  ls -l "$stage"
  exit 0
fi

lib=""  # libgpumem_torch.so's folder, for bench_models (GPUMEM_LIB)
if [[ -n $bin ]]; then
  bin=$(cd "$bin" && pwd)
  cli=$bin/gpumem tests=$bin/gpumem_gpu_tests
  [[ -f $bin/libgpumem_torch.so ]] && lib=$bin
  [[ -z $traces && -d $bin/traces ]] && traces=$bin/traces
elif [[ -n $no_gpu ]]; then
  build=${build:-build}
  [[ -x $build/gpumem ]] || { echo "gpu_check.sh: --no-gpu needs a built $build/gpumem (or --bin DIR)" >&2; exit 2; }
  build=$(cd "$build" && pwd)
  cli=$build/gpumem tests=""
else
  build=${build:-build}
  build_here "$build" || exit 1
  build=$(cd "$build" && pwd)
  cli=$build/gpumem tests=$build/tests/gpumem_gpu_tests
  [[ -f $build/integrations/libgpumem_torch.so ]] && lib=$build/integrations
fi
need=("$cli")
[[ -z $no_gpu ]] && need+=("$tests")
for f in "${need[@]}"; do
  [[ -x $f ]] || { echo "gpu_check.sh: $f is missing or not executable" >&2; exit 2; }
done
mkdir -p "$out"
out=$(cd "$out" && pwd)
rm -f "$out/bench.jsonl" "$out/models.jsonl"  # the goals table reads only this run's
# The GPU tests read the bundled examples from here when the build tree's path is not on this machine.
export GPUMEM_EXAMPLES="$root/examples"

start=$SECONDS
rows=() failed=0
# step NAME LOG SECONDS COMMAND...: runs it under a timeout (at most what is left of --budget, less
# a few seconds for the tables), logs its output, records a table row.
step() {
  local name=$1 log=$2 limit=$3; shift 3
  local left=$((budget - (SECONDS - start) - 5))
  if ((left < 10)); then
    rows+=("$name|SKIP (no time left in --budget $budget s)|0|-")
    echo "== $name: skipped, no time left"
    return
  fi
  ((limit > left)) && limit=$left
  local t0=$SECONDS rc=0
  timeout "$limit" "$@" >"$log" 2>&1 || rc=$?
  local result=pass
  if ((rc == 124)); then result="FAIL (timed out after ${limit} s)"
  elif ((rc != 0)); then result="FAIL (exit $rc)"; fi
  [[ $result == pass ]] || failed=1
  rows+=("$name|$result|$((SECONDS - t0))|${log#"$out"/}")
  echo "== $name: $result"
}
# skip NAME WHY: a table row for a step that does not run here.
skip() { rows+=("$1|SKIP ($2)|0|-"); echo "== $1: skipped ($2)"; }

if [[ -n $no_gpu ]]; then
  echo "gpu_check.sh: --no-gpu: the simulated device only (no GPU suite, sanitizers, PyTorch or live models)"
  echo "no GPU (--no-gpu)" >"$out/smi.log"
else
  nvidia-smi -L >"$out/smi.log" 2>/dev/null || echo "an unnamed GPU (no nvidia-smi)" >"$out/smi.log"
  step "gpumem info" "$out/info.txt" 60 "$cli" info
  if [[ ${rows[-1]} != *"|pass|"* ]]; then
    echo "gpu_check.sh: no GPU to check: $(tail -1 "$out/info.txt") (--no-gpu checks the script and the" \
         "simulated tables)" >&2
    exit 1
  fi
  "$cli" info --json >"$out/info.json" 2>/dev/null || true

  if [[ -n $build ]]; then
    step "GPU suite (ctest -L gpu)" "$out/gpu_tests.log" 240 ctest --test-dir "$build" -L gpu --output-on-failure
  else
    step "GPU suite (gpumem_gpu_tests)" "$out/gpu_tests.log" 240 "$tests"
  fi
  # Skips count as failures on a GPU machine: every GPU test skips only when no GPU is visible.
  if grep -qE "\[  SKIPPED \] [1-9]|[1-9][0-9]* tests? skipped|\*\*\*Skipped" "$out/gpu_tests.log"; then
    rows[-1]="${rows[-1]/|pass|/|FAIL (tests skipped)|}"; failed=1
  fi
fi

# Where PyTorch (with its headers) is installed: its caching allocator joins the bench as a peer in
# the same process (bench/torch/torch_peer.cpp, built here with g++), and a real job's memory
# snapshot is converted and replayed (scripts/snapshot_check.sh).
torch_dir=""
if [[ -z ${SKIP_TORCH:-} && -z $no_gpu ]]; then
  torch_dir=$("$py" -c 'import torch, os; print(os.path.dirname(torch.__file__))' 2>/dev/null || true)
  [[ -n $torch_dir ]] || skip "PyTorch steps" "$py has no torch"
fi
peer_args=()
if [[ -z ${SKIP_BENCH:-} && -n $torch_dir && -d $torch_dir/include ]]; then
  cuda=${CUDA_HOME:-/usr/local/cuda}
  step "build the PyTorch peer" "$out/torch_peer_build.log" 120 g++ -std=c++20 -O2 -DNDEBUG \
    -D_GLIBCXX_USE_CXX11_ABI=1 -fPIC -shared -I"$root/include" -I"$root/src/cli" -isystem "$torch_dir/include" \
    -isystem "$torch_dir/include/torch/csrc/api/include" -isystem "$cuda/include" \
    "$root/bench/torch/torch_peer.cpp" -L"$torch_dir/lib" -lc10_cuda -lc10 -Wl,-rpath,"$torch_dir/lib" \
    "$cuda/lib64/libcudart_static.a" -ldl -lrt -lpthread -o "$out/libgpumem_torch_peer.so"
  [[ -f $out/libgpumem_torch_peer.so ]] && peer_args=(--peer-lib "$out/libgpumem_torch_peer.so")
fi

if [[ -z ${SKIP_BENCH:-} ]]; then
  trace_args=()
  [[ -n $traces ]] && trace_args=(--traces "$traces")
  sim_args=()
  [[ -n $no_gpu ]] && sim_args=(--simulate)
  step "gpumem bench all" "$out/bench.txt" 180 "$cli" bench all "${sim_args[@]}" --reps "$reps" \
    --json-out "$out/bench.jsonl" "${trace_args[@]}" "${peer_args[@]}"
else
  skip "gpumem bench all" "SKIP_BENCH"
fi

# The live models: gpumem.torch.use() with no options against PyTorch's own allocator, plain and with
# expandable segments, interleaved in fresh processes, for bench_models' own budget.
if [[ -n $torch_dir && -z ${SKIP_MODELS:-} ]]; then
  if [[ -z $lib ]]; then
    skip "bench_models.py" "no libgpumem_torch.so: --build builds it, --stage copies it"
  else
    # Its own budget, within what is left of ours: it ends its last child and prints its tables by
    # about budget + 60 s.
    models_budget=${MODELS_BUDGET_S:-150}
    left=$((budget - (SECONDS - start) - 5 - 90))
    ((models_budget > left)) && models_budget=$left
    ((models_budget < 60)) && models_budget=0
    [[ $models_budget == 0 ]] && skip "bench_models.py (live models)" "no time left in --budget $budget s"
    [[ $models_budget == 0 ]] || step "bench_models.py (live models)" "$out/models.txt" $((models_budget + 90)) \
      env PYTHONPATH="$root/integrations/python${PYTHONPATH:+:$PYTHONPATH}" GPUMEM_LIB="$lib" PYTHONUNBUFFERED=1 \
      "$py" "$root/integrations/bench_models.py" --budget-s "$models_budget" --json-out "$out/models.jsonl"
  fi
fi

# The sanitizers after the benchmarks: what is left of --budget goes to them.
if [[ -z $no_gpu && -z ${SKIP_SANITIZERS:-} ]]; then
  sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
  step "compute-sanitizer memcheck" "$out/memcheck.log" 150 env GPUMEM_STRESS_BLOCKS="${MEMCHECK_BLOCKS:-20000}" GPUMEM_GRAPH_REPLAYS=1000 \
    "$sanitizer" --tool memcheck --leak-check full --error-exitcode 3 "$tests" \
    --gtest_filter="${MEMCHECK_FILTER:-IntegrityStress.VmmUpstream*:PoolOnGpu/2.*:CudaOrdering.*:*GraphCapture*:DevicePoolsGpu.*}"
  step "compute-sanitizer racecheck" "$out/racecheck.log" 150 env GPUMEM_STRESS_BLOCKS="${RACECHECK_BLOCKS:-2000}" \
    "$sanitizer" --tool racecheck --error-exitcode 3 "$tests" \
    --gtest_filter="${RACECHECK_FILTER:-IntegrityStress.VmmUpstream*:PoolOnGpu/2.*}"
elif [[ -z $no_gpu ]]; then
  skip "compute-sanitizer" "SKIP_SANITIZERS"
fi

if [[ -n $torch_dir ]]; then
  # shellcheck disable=SC2016  # the inner script takes its paths as arguments
  step "PyTorch snapshot replayed" "$out/snapshot.log" 120 env PATH="$(dirname "$(command -v "$py")"):$PATH" bash -c \
    'python3 "$0/integrations/record_snapshot.py" -o "$1/snapshot" && bash "$0/scripts/snapshot_check.sh" "$1/snapshot" "$2"' \
    "$root" "$out" "$cli"
fi

echo
echo "gpu_check on $(head -1 "$out/smi.log" 2>/dev/null || echo "an unnamed GPU"); logs in $out;" \
     "$((SECONDS - start)) s of --budget $budget s"
printf '%-32s %-40s %6s  %s\n' step result seconds log
for r in "${rows[@]}"; do
  IFS='|' read -r name result secs log <<<"$r"
  printf '%-32s %-40s %6s  %s\n' "$name" "$result" "$secs" "$log"
done
echo
echo "Goals of the default (bench: gpumem's own figures, peers beside them in $out/bench.txt; models: $out/models.txt)"
python3 "$root/scripts/results_md.py" goals "$out/bench.jsonl" "$out/models.jsonl" || failed=1
if [[ -f $out/bench.jsonl && -z $no_gpu ]]; then
  echo
  echo "To store this run: python3 scripts/results_md.py record bench/results/MODEL.jsonl --info $out/info.json \\"
  echo "  --commit \"\$(git rev-parse --short HEAD)\" --command \"gpumem bench all --reps $reps\" --input $out/bench.jsonl"
fi
exit $failed
