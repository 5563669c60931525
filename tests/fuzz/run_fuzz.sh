#!/usr/bin/env bash
# Usage: tests/fuzz/run_fuzz.sh SECONDS [JOBS]
# Configures a clang build in build-fuzz/, builds the libFuzzer targets and runs each for SECONDS,
# starting from the seed corpora (new inputs go to build-fuzz/corpus-*, crashes to build-fuzz/).
# With JOBS >= 2 the targets run side by side, each on its own core for its full SECONDS.
set -euo pipefail
secs=${1:?usage: run_fuzz.sh SECONDS [JOBS]}
jobs=${2:-2}
root=$(cd "$(dirname "$0")/../.." && pwd)
bdir="$root/build-fuzz"
cxx=$(command -v clang++-14 || command -v clang++)
# -O1 with line tables: about half the build's CPU time at -O2 -g.
cmake -S "$root" -B "$bdir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER="$cxx" \
  "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -gline-tables-only -DNDEBUG" \
  -DGPUMEM_FUZZ=ON -DGPUMEM_BUILD_TESTS=OFF -DGPUMEM_BUILD_BENCH=OFF -DGPUMEM_WITH_CUDA=OFF >/dev/null
cmake --build "$bdir" -j"$jobs" --target gpumem_pool_fuzz gpumem_trace_fuzz

fuzz() {  # fuzz TARGET: runs it for $secs, its output in build-fuzz/fuzz-TARGET.log
  local t=$1 work="$bdir/corpus-$1"
  mkdir -p "$work"
  (cd "$bdir" && "./tests/fuzz/gpumem_${t}_fuzz" -max_total_time="$secs" -print_final_stats=1 \
     -max_len=4096 -timeout=20 "$work" "$root/tests/fuzz/corpus/$t" >"$bdir/fuzz-$t.log" 2>&1) || true
}
targets=(pool trace)
echo "== ${targets[*]}: ${secs}s each"
if ((jobs >= 2)); then
  for t in "${targets[@]}"; do fuzz "$t" & done
  wait
else
  for t in "${targets[@]}"; do fuzz "$t"; done
fi
status=0
for t in "${targets[@]}"; do
  echo "== $t"
  grep -E "^(#[0-9]+[[:space:]]+DONE|stat::number_of_executed_units|==[0-9]+==ERROR|SUMMARY|artifact_prefix)" \
    "$bdir/fuzz-$t.log" || true
  if grep -qE "Test unit written to|==[0-9]+==ERROR" "$bdir/fuzz-$t.log" ||
     ! grep -qE "^#[0-9]+[[:space:]]+DONE" "$bdir/fuzz-$t.log"; then
    echo "!! $t: crash or no clean finish, see $bdir/fuzz-$t.log"; tail -20 "$bdir/fuzz-$t.log"; status=1
  fi
done
exit $status
