# `gpumem bench --json-out FILE`: the tables on the terminal and the same figures as JSON lines in the
# file (what scripts/gpu_check.sh keeps), one line per figure.
set(_bjo_file ${CMAKE_CURRENT_BINARY_DIR}/bench_json_out.jsonl)
add_test(NAME cli_bench_json_out_tables_and_lines
  COMMAND sh -c "rm -f \"$1\" && \"$0\" bench pair --simulate --reps 1 --allocator gpumem-sim --json-out \"$1\" && echo '--- file' && cat \"$1\""
          $<TARGET_FILE:gpumem_cli> ${_bjo_file})
set_tests_properties(cli_bench_json_out_tables_and_lines PROPERTIES LABELS cpu
  PASS_REGULAR_EXPRESSION "pair: ns_per_pair, median of up to 1 runs.*--- file\n\\{\"pattern\":\"pair\",\"allocator\":\"gpumem-sim\",[^\n]*\"size_bytes\":512,\"ns_per_pair\":[0-9.e+]+[^\n]*\n\\{\"pattern\":\"pair\"[^\n]*\n\\{\"pattern\":\"pair\"[^\n]*\n\\{\"pattern\":\"pair\"[^\n]*\n\\{\"pattern\":\"pair\"[^\n]*\n$")

# A file that cannot be written is refused before anything is timed: exit 2, saying which and why.
add_test(NAME cli_bench_json_out_unwritable_refused
  COMMAND sh -c "\"$0\" bench pair --simulate --reps 1 --json-out /nonexistent-dir/x.jsonl; echo \"exit $?\""
          $<TARGET_FILE:gpumem_cli>)
set_tests_properties(cli_bench_json_out_unwritable_refused PROPERTIES LABELS cpu
  PASS_REGULAR_EXPRESSION "gpumem bench: error: --json-out /nonexistent-dir/x.jsonl: cannot open it for writing\nexit 2"
  FAIL_REGULAR_EXPRESSION "gpumem bench: gpumem-sim")

# Every pool option bench takes is named in gpumem's rows when it is not the default, so two runs'
# lines say what differed between them (pool_option_flags.cmake).

# The plain tables say which pool options gpumem's figures are of.
add_test(NAME cli_bench_tables_name_the_pool_options
  COMMAND $<TARGET_FILE:gpumem_cli> bench pair --simulate --reps 1 --allocator gpumem-sim --max-reserved 8G --settle)
set_tests_properties(cli_bench_tables_name_the_pool_options PROPERTIES LABELS cpu
  PASS_REGULAR_EXPRESSION "gpumem-sim: pool options max_reserved_bytes=8589934592,settle=1\n")
add_test(NAME cli_bench_tables_name_the_default_options
  COMMAND $<TARGET_FILE:gpumem_cli> bench pair --simulate --reps 1 --allocator gpumem-sim)
set_tests_properties(cli_bench_tables_name_the_default_options PROPERTIES LABELS cpu
  PASS_REGULAR_EXPRESSION "gpumem-sim: pool options the defaults\n")

# The host's speed before each pattern: in every JSON line, and over the run under the tables.
add_test(NAME cli_bench_rows_carry_the_host_speed
  COMMAND $<TARGET_FILE:gpumem_cli> bench churn --simulate --reps 1 --json)
set_tests_properties(cli_bench_rows_carry_the_host_speed PROPERTIES LABELS cpu
  PASS_REGULAR_EXPRESSION "\"allocator\":\"gpumem-sim\".*\"host_ns_per_sim_pair\":[0-9.]+,.*\"allocator\":\"malloc\".*\"host_ns_per_sim_pair\":[0-9.]+,")
add_test(NAME cli_bench_tables_give_the_host_speed
  COMMAND $<TARGET_FILE:gpumem_cli> bench pair --simulate --reps 1 --allocator gpumem-sim)
set_tests_properties(cli_bench_tables_give_the_host_speed PROPERTIES LABELS cpu
  PASS_REGULAR_EXPRESSION "host speed: a simulated 512 B alloc\\+free pair took [0-9.]+-[0-9.]+ ns before the patterns \\([0-9.]+x\\)\n  before gpumem-sim's: pair [0-9.]+\n")

# --rounds: the allocators take turns; each round's lines carry its number, then one line per figure
# with every round's value and their median; the tables say so.
add_test(NAME cli_bench_rounds_json
  COMMAND $<TARGET_FILE:gpumem_cli> bench pair --simulate --reps 1 --rounds 3 --json)
set_tests_properties(cli_bench_rounds_json PROPERTIES LABELS cpu
  PASS_REGULAR_EXPRESSION "\"allocator\":\"malloc\",[^\n]*\"round\":2}\n.*\"allocator\":\"gpumem-sim\",[^\n]*\"round\":3}\n.*\"allocator\":\"gpumem-sim\",\"device\":\"simulated\",\"size_bytes\":512,[^\n]*\"rounds\":3,\"round_values\":\\[[0-9.e+]+,[0-9.e+]+,[0-9.e+]+\\]}")
add_test(NAME cli_bench_rounds_table
  COMMAND $<TARGET_FILE:gpumem_cli> bench churn --simulate --reps 1 --rounds 2 --allocator gpumem-sim)
set_tests_properties(cli_bench_rounds_table PROPERTIES LABELS cpu
  PASS_REGULAR_EXPRESSION "churn \\(1000 live blocks, 256 B - 64 MiB\\): ns_per_op, median of 2 rounds, each the median of up to 1 runs")
add_test(NAME cli_bench_rounds_zero_refused
  COMMAND $<TARGET_FILE:gpumem_cli> bench pair --simulate --rounds 0)
set_tests_properties(cli_bench_rounds_zero_refused PROPERTIES LABELS cpu WILL_FAIL TRUE)
