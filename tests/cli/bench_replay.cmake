# `gpumem bench replay`: every allocator gets a cold row (first pass on a fresh allocator) and a
# warm row (a second pass on the same one), each naming its trace.
set(_br_trace ${PROJECT_SOURCE_DIR}/examples/varlen_inference.csv)
add_test(NAME cli_bench_replay_cold_and_warm
  COMMAND $<TARGET_FILE:gpumem_cli> bench replay --simulate --reps 1 --traces ${_br_trace} --json)
set_tests_properties(cli_bench_replay_cold_and_warm PROPERTIES LABELS cpu
  PASS_REGULAR_EXPRESSION "\"pattern\":\"replay\",\"allocator\":\"gpumem-sim\",[^\n]*\"trace\":\"varlen_inference.csv\",\"ns_per_op\":[0-9.e+]+[^\n]*\n\\{\"pattern\":\"replay-warm\",\"allocator\":\"gpumem-sim\",[^\n]*\"trace\":\"varlen_inference.csv\",\"ns_per_op\":[0-9.e+]+[^\n]*\n\\{\"pattern\":\"replay\",\"allocator\":\"malloc\",[^\n]*\n\\{\"pattern\":\"replay-warm\",\"allocator\":\"malloc\"")
