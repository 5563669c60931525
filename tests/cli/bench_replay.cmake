# `gpumem bench replay`: every allocator gets a cold row (first pass on a fresh allocator) and a
# warm row (a second pass on the same one), each naming its trace.
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
  PASS_REGULAR_EXPRESSION "gpumem-sim: peak reserved / peak live \\(granules moved\\): churn [1-9]\\.[0-9]+ \\([0-9]+\\)")

# `--settle`: pool::settle between the cold and the warm pass, and the rows say so (what it does to
# a replay: pool_settle_test.cpp).
add_test(NAME cli_bench_replay_settle_in_the_rows
  COMMAND $<TARGET_FILE:gpumem_cli> bench replay --simulate --reps 1
          --traces ${PROJECT_SOURCE_DIR}/examples/vision_two_streams.csv --allocator gpumem-sim --settle --json)
set_tests_properties(cli_bench_replay_settle_in_the_rows PROPERTIES LABELS cpu
  PASS_REGULAR_EXPRESSION "\"pattern\":\"replay-warm\",\"allocator\":\"gpumem-sim\",[^\n]*\"granules_moved\":[0-9]+,\"driver_granules\":[0-9]+,\"pool_options\":\"settle=1\"")
