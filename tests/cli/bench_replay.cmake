# `gpumem bench replay`: every allocator gets a cold row (first pass on a fresh allocator) and a
# warm row (the passes after it on the same one), each naming its trace.
set(_br_trace ${PROJECT_SOURCE_DIR}/examples/varlen_inference.csv)
add_test(NAME cli_bench_replay_cold_and_warm
  COMMAND $<TARGET_FILE:gpumem_cli> bench replay --simulate --reps 1 --traces ${_br_trace} --json)
set_tests_properties(cli_bench_replay_cold_and_warm PROPERTIES LABELS cpu
  PASS_REGULAR_EXPRESSION "\"pattern\":\"replay\",\"allocator\":\"gpumem-sim\",[^\n]*\"trace\":\"varlen_inference.csv\",\"ns_per_op\":[0-9.e+]+[^\n]*\n\\{\"pattern\":\"replay-warm\",\"allocator\":\"gpumem-sim\",[^\n]*\"trace\":\"varlen_inference.csv\",\"ns_per_op\":[0-9.e+]+[^\n]*\n\\{\"pattern\":\"replay\",\"allocator\":\"malloc\",[^\n]*\n\\{\"pattern\":\"replay-warm\",\"allocator\":\"malloc\"")

# gpumem's rows say what the speed cost in memory (peak reserved / peak live, granules moved); the
# peers' rows do not pretend to know.
add_test(NAME cli_bench_replay_reserve_beside_speed
  COMMAND $<TARGET_FILE:gpumem_cli> bench replay --simulate --reps 1 --traces ${_br_trace} --json)
set_tests_properties(cli_bench_replay_reserve_beside_speed PROPERTIES LABELS cpu
  PASS_REGULAR_EXPRESSION "\"allocator\":\"gpumem-sim\",[^\n]*\"ns_per_op\":[0-9.e+]+,\"peak_reserved_over_live\":1\\.[0-9]+,\"granules_moved\":[1-9][0-9]*,[^\n]*\n[^\n]*\n\\{\"pattern\":\"replay\",\"allocator\":\"malloc\",[^\n]*\"ns_per_op\":[0-9.e+]+,\"host_ns_per_sim_pair\":[0-9.e+]+,\"reps\"")
add_test(NAME cli_bench_churn_reserve_in_the_table
  COMMAND $<TARGET_FILE:gpumem_cli> bench churn --simulate --reps 1 --allocator gpumem-sim)
set_tests_properties(cli_bench_churn_reserve_in_the_table PROPERTIES LABELS cpu
  PASS_REGULAR_EXPRESSION "gpumem-sim: peak reserved / peak live \\(granules the driver mapped or unmapped\\): churn [1-9]\\.[0-9]+ \\([0-9]+\\)")

# The granule figures are the pool's own, pass by pass (replay's pass_log says the same), and the
# goal lines are computed from them.
add_test(NAME cli_bench_replay_granules_match_replay
  COMMAND sh -c "${GPUMEM_PYTHON3} \"$0\" \"$1\" \"$2\""
          ${CMAKE_CURRENT_LIST_DIR}/bench_granules_match_replay.py $<TARGET_FILE:gpumem_cli> ${_br_trace})
set_tests_properties(cli_bench_replay_granules_match_replay PROPERTIES LABELS cpu SKIP_RETURN_CODE 77)

# --passes: the warm row is over passes - 1 warm passes; fewer than two passes is refused.
add_test(NAME cli_bench_replay_passes
  COMMAND $<TARGET_FILE:gpumem_cli> bench replay --simulate --reps 1 --passes 5 --traces ${_br_trace}
          --allocator gpumem-sim --json)
set_tests_properties(cli_bench_replay_passes PROPERTIES LABELS cpu
  PASS_REGULAR_EXPRESSION "\"pattern\":\"replay\",[^\n]*\"peak_granules\":[1-9][0-9]*,\"driver_maps\":[1-9][0-9]*,[^\n]*\n\\{\"pattern\":\"replay-warm\",[^\n]*\"peak_granules\":[1-9][0-9]*,\"passes\":4,")
add_test(NAME cli_bench_replay_one_pass_refused
  COMMAND $<TARGET_FILE:gpumem_cli> bench replay --simulate --passes 1)
set_tests_properties(cli_bench_replay_one_pass_refused PROPERTIES LABELS cpu WILL_FAIL TRUE)

# The goals of the default, last: in the table (met / NOT MET / not measured, with the bound) and as
# JSON lines; cudaMallocAsync's goal is not measured on the simulator, and says why.
add_test(NAME cli_bench_goals_table
  COMMAND $<TARGET_FILE:gpumem_cli> bench all --simulate --reps 1 --traces ${_br_trace} --allocator gpumem-sim)
set_tests_properties(cli_bench_goals_table PROPERTIES LABELS cpu
  PASS_REGULAR_EXPRESSION "goals of the default \\(gpumem-sim, simulated\\): [0-9]+ of 13 met, 1 not measured\n  figure +value +goal  unit *\n  varlen_inference.csv: peak reserved / peak live +[0-9.]+ +<= 1.03  x +(met|NOT MET)\n.*  varlen_inference.csv: first-pass ns/op / cudaMallocAsync's +- +<= 0.7  x +not measured \\(no cudaMallocAsync on the simulated device\\)\n  pair 512 B: ns per alloc\\+free +[0-9.e+]+ +<= 25  ns +(met|NOT MET)\n.*  churn: peak reserved / peak live +[0-9.]+ +<= 1.1  x .*  16 threads / 1 thread +[0-9.e+-]+ +>= 8  x +(met|NOT MET)\n")
add_test(NAME cli_bench_goals_json
  COMMAND $<TARGET_FILE:gpumem_cli> bench churn --simulate --reps 1 --json)
set_tests_properties(cli_bench_goals_json PROPERTIES LABELS cpu
  PASS_REGULAR_EXPRESSION "\\{\"pattern\":\"goal\",\"goal\":\"churn_ns\",\"what\":\"churn: ns/op\",\"allocator\":\"gpumem-sim\",\"device\":\"simulated\",\"value\":[0-9.e+]+,\"unit\":\"ns/op\",\"compare\":\"<=\",\"bound\":80.0,\"met\":(true|false)}\n\\{\"pattern\":\"goal\",\"goal\":\"churn_reserve\",")

# On a GPU: the peers that can tell (cudaMallocAsync's pool, CUB's cache) give their peak reserved /
# peak live beside gpumem's, and cudaMallocAsync's first pass makes its goal measured. Skips (77)
# without a GPU.
add_test(NAME gpu_cli_bench_replay_peers_reserve
  COMMAND sh -c "\"$0\" info >/dev/null 2>&1 || { echo 'no GPU: skipped'; exit 77; }; out=$(\"$0\" bench replay --reps 1 --traces \"$1\" --allocator gpumem-gpu --allocator cuda-malloc-async --allocator cub-caching --json) || exit 1; echo \"$out\"; for a in cuda-malloc-async cub-caching; do echo \"$out\" | grep -q \"\\\"pattern\\\":\\\"replay\\\",\\\"allocator\\\":\\\"$a\\\",[^}]*\\\"peak_reserved_over_live\\\":[1-9]\" || { echo \"no reserve for $a\"; exit 1; }; done; echo \"$out\" | grep -q '\"goal\":\"first_pass_vs_async\",[^}]*\"met\":\\(true\\|false\\)'"
          $<TARGET_FILE:gpumem_cli> ${_br_trace})
set_tests_properties(gpu_cli_bench_replay_peers_reserve PROPERTIES LABELS gpu SKIP_RETURN_CODE 77)
