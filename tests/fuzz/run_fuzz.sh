#!/usr/bin/env bash
# Usage: tests/fuzz/run_fuzz.sh SECONDS [JOBS]
# Configures a clang build in build-fuzz/, builds the libFuzzer targets and runs each for SECONDS,
# starting from the seed corpora (new inputs go to build-fuzz/corpus-*, crashes to build-fuzz/).
set -euo pipefail
secs=${1:?usage: run_fuzz.sh SECONDS [JOBS]}
jobs=${2:-2}
root=$(cd "$(dirname "$0")/../.." && pwd)
bdir="$root/build-fuzz"
cxx=$(command -v clang++-14 || command -v clang++)
cmake -S "$root" -B "$bdir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER="$cxx" \
  -DGPUMEM_FUZZ=ON -DGPUMEM_BUILD_TESTS=OFF -DGPUMEM_BUILD_BENCH=OFF -DGPUMEM_WITH_CUDA=OFF >/dev/null
cmake --build "$bdir" -j"$jobs" --target gpumem_pool_fuzz gpumem_trace_fuzz
status=0
for t in pool trace; do
  work="$bdir/corpus-$t"
  mkdir -p "$work"
  echo "== $t: ${secs}s"
  if ! (cd "$bdir" && "./tests/fuzz/gpumem_${t}_fuzz" -max_total_time="$secs" -print_final_stats=1 \
        -max_len=4096 -timeout=20 "$work" "$root/tests/fuzz/corpus/$t" 2>&1 | tee "$bdir/fuzz-$t.log" |
        grep -E "^(#[0-9]+ +DONE|stat::number_of_executed_units|==[0-9]+==ERROR|SUMMARY|artifact_prefix)"); then
    :
  fi
  if grep -q "Test unit written to" "$bdir/fuzz-$t.log"; then
    echo "!! $t: crash, see $bdir/fuzz-$t.log"; status=1
  fi
done
exit $status
