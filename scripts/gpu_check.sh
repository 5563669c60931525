#!/usr/bin/env bash
# The checks only a GPU can run: the GPU suite, compute-sanitizer (memcheck, racecheck) over its fast
# tests, `gpumem info`, and `gpumem bench all --json-out` against the peers; one table last.
#
#   scripts/gpu_check.sh [--build DIR | --bin DIR] [--out DIR] [--traces DIR] [--reps N]
#   scripts/gpu_check.sh --stage DIR [--build DIR]
#
# --build DIR  build gpumem and gpumem_gpu_tests in DIR (default build; configured when empty, which
#              needs the Debian dev packages) and run the GPU suite through CTest (`ctest -L gpu`).
# --bin DIR    take prebuilt binaries from DIR (gpumem, gpumem_gpu_tests, and traces/ if there): for a
#              GPU machine without the dev packages. Nothing is configured or installed; no network.
# --stage DIR  (on the build machine) build as --build does and copy the two binaries and the shared
#              traces into DIR. They carry the CUDA runtime statically and run on any driver for sm_90.
# --out DIR    logs, info.json and bench.jsonl (default gpu-check-out); --traces: traces for the
#              bench's replay (default DIR/traces with --bin, else gpumem's own default).
# With PyTorch installed, two more steps: its caching allocator joins the bench as a peer, and a real
# job's memory snapshot is replayed (scripts/snapshot_check.sh); SKIP_TORCH=1 leaves them out.
# Env: MEMCHECK_FILTER, RACECHECK_FILTER (gtest filters), MEMCHECK_BLOCKS, RACECHECK_BLOCKS
# (GPUMEM_STRESS_BLOCKS under each tool), SKIP_BENCH=1. Exit 0 only when every step passed.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build="" bin="" stage="" out=gpu-check-out traces="" reps=3
while (($#)); do
  case $1 in
    --build) build=${2:?--build needs a folder}; shift 2 ;;
    --bin) bin=${2:?--bin needs a folder}; shift 2 ;;
    --stage) stage=${2:?--stage needs a folder}; shift 2 ;;
    --out) out=${2:?--out needs a folder}; shift 2 ;;
    --traces) traces=${2:?--traces needs a folder}; shift 2 ;;
    --reps) reps=${2:?--reps needs a count}; shift 2 ;;
    -h|--help) sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "gpu_check.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
if [[ -n $bin && -n $build ]]; then
  echo "gpu_check.sh: --bin and --build exclude each other" >&2; exit 2
fi

# build DIR: configure when new, then build only the CLI and the GPU test program.
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
  cmake --build "$dir" -j"$(nproc)" --target gpumem_cli gpumem_gpu_tests
}

if [[ -n $stage ]]; then
  build=${build:-build}
  build_here "$build" || exit 1
  mkdir -p "$stage"
  cp "$build/gpumem" "$build/tests/gpumem_gpu_tests" "$stage/"
  for t in "$root/shared/traces" "$root/../shared/traces"; do
    if [[ -d $t ]]; then mkdir -p "$stage/traces" && cp "$t"/*.csv* "$stage/traces/"; break; fi
  done
  ls -l "$stage"
  exit 0
fi

if [[ -n $bin ]]; then
  bin=$(cd "$bin" && pwd)
  cli=$bin/gpumem tests=$bin/gpumem_gpu_tests
  [[ -z $traces && -d $bin/traces ]] && traces=$bin/traces
else
  build=${build:-build}
  build_here "$build" || exit 1
  build=$(cd "$build" && pwd)
  cli=$build/gpumem tests=$build/tests/gpumem_gpu_tests
fi
for f in "$cli" "$tests"; do
  [[ -x $f ]] || { echo "gpu_check.sh: $f is missing or not executable" >&2; exit 2; }
done
mkdir -p "$out"
out=$(cd "$out" && pwd)
# The GPU tests read the bundled examples from here when the build tree's path is not on this machine.
export GPUMEM_EXAMPLES="$root/examples"

rows=() failed=0
# step NAME LOG SECONDS COMMAND...: runs it under a timeout, logs its output, records a table row.
step() {
  local name=$1 log=$2 limit=$3; shift 3
  local t0=$SECONDS rc=0
  timeout "$limit" "$@" >"$log" 2>&1 || rc=$?
  local result=pass
  if ((rc == 124)); then result="FAIL (timed out after ${limit} s)"
  elif ((rc != 0)); then result="FAIL (exit $rc)"; fi
  [[ $result == pass ]] || failed=1
  rows+=("$name|$result|$((SECONDS - t0))|${log#"$out"/}")
  echo "== $name: $result"
}

nvidia-smi -L >"$out/smi.log" 2>&1 || true
step "gpumem info" "$out/info.txt" 60 "$cli" info
if [[ ${rows[-1]} != *"|pass|"* ]]; then
  echo "gpu_check.sh: no GPU to check: $(tail -1 "$out/info.txt")" >&2
  exit 1
fi
"$cli" info --json >"$out/info.json" 2>/dev/null || true

if [[ -n $build ]]; then
  step "GPU suite (ctest -L gpu)" "$out/gpu_tests.log" 600 ctest --test-dir "$build" -L gpu --output-on-failure
else
  step "GPU suite (gpumem_gpu_tests)" "$out/gpu_tests.log" 600 "$tests"
fi
# Skips count as failures on a GPU machine: every GPU test skips only when no GPU is visible.
if grep -qE "\[  SKIPPED \] [1-9]|[1-9][0-9]* tests? skipped|\*\*\*Skipped" "$out/gpu_tests.log"; then
  rows[-1]="${rows[-1]/|pass|/|FAIL (tests skipped)|}"; failed=1
fi

sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
step "compute-sanitizer memcheck" "$out/memcheck.log" 300 env GPUMEM_STRESS_BLOCKS="${MEMCHECK_BLOCKS:-20000}" \
  "$sanitizer" --tool memcheck --leak-check full --error-exitcode 3 "$tests" \
  --gtest_filter="${MEMCHECK_FILTER:-IntegrityStress.VmmUpstream*:PoolOnGpu/2.*:CudaOrdering.*}"
step "compute-sanitizer racecheck" "$out/racecheck.log" 300 env GPUMEM_STRESS_BLOCKS="${RACECHECK_BLOCKS:-2000}" \
  "$sanitizer" --tool racecheck --error-exitcode 3 "$tests" \
  --gtest_filter="${RACECHECK_FILTER:-IntegrityStress.VmmUpstream*:PoolOnGpu/2.*}"

# Where PyTorch (with its headers) is installed: its caching allocator joins the bench as a peer in
# the same process (bench/torch/torch_peer.cpp, built here with g++), and a real job's memory
# snapshot is converted and replayed (scripts/snapshot_check.sh).
torch_dir=""
if [[ -z ${SKIP_TORCH:-} ]]; then
  torch_dir=$(python3 -c 'import torch, os; print(os.path.dirname(torch.__file__))' 2>/dev/null || true)
fi
peer_args=()
if [[ -z ${SKIP_BENCH:-} && -n $torch_dir && -d $torch_dir/include ]]; then
  cuda=${CUDA_HOME:-/usr/local/cuda}
  step "build the PyTorch peer" "$out/torch_peer_build.log" 300 g++ -std=c++20 -O2 -DNDEBUG \
    -D_GLIBCXX_USE_CXX11_ABI=1 -fPIC -shared -I"$root/include" -isystem "$torch_dir/include" \
    -isystem "$torch_dir/include/torch/csrc/api/include" -isystem "$cuda/include" \
    "$root/bench/torch/torch_peer.cpp" -L"$torch_dir/lib" -lc10_cuda -lc10 -Wl,-rpath,"$torch_dir/lib" \
    "$cuda/lib64/libcudart_static.a" -ldl -lrt -lpthread -o "$out/libgpumem_torch_peer.so"
  [[ -f $out/libgpumem_torch_peer.so ]] && peer_args=(--peer-lib "$out/libgpumem_torch_peer.so")
fi
if [[ -n $torch_dir ]]; then
  # shellcheck disable=SC2016  # the inner script takes its paths as arguments
  step "PyTorch snapshot replayed" "$out/snapshot.log" 300 bash -c \
    'python3 "$0/integrations/record_snapshot.py" -o "$1/snapshot" && bash "$0/scripts/snapshot_check.sh" "$1/snapshot" "$2"' \
    "$root" "$out" "$cli"
fi

if [[ -z ${SKIP_BENCH:-} ]]; then
  trace_args=()
  [[ -n $traces ]] && trace_args=(--traces "$traces")
  step "gpumem bench all" "$out/bench.txt" 900 "$cli" bench all --reps "$reps" \
    --json-out "$out/bench.jsonl" "${trace_args[@]}" "${peer_args[@]}"
fi

echo
echo "gpu_check on $(head -1 "$out/smi.log" 2>/dev/null || echo "an unnamed GPU"); logs in $out"
printf '%-30s %-28s %6s  %s\n' step result seconds log
for r in "${rows[@]}"; do
  IFS='|' read -r name result secs log <<<"$r"
  printf '%-30s %-28s %6s  %s\n' "$name" "$result" "$secs" "$log"
done
exit $failed
