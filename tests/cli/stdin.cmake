# `-` reads a trace from standard input, plain or gzip, wherever a trace is read; it is named
# `<stdin>` in the output.
set(_cli $<TARGET_FILE:gpumem_cli>)
set(_small ${PROJECT_SOURCE_DIR}/examples/small_training.csv)

# The same figures as from the file.
add_test(NAME cli_stdin_replay
  COMMAND sh -c "\"$0\" replay --json - < \"$1\"" ${_cli} ${_small})
set_tests_properties(cli_stdin_replay PROPERTIES LABELS cpu
  PASS_REGULAR_EXPRESSION "^\\{[^\n]*\"ops\":1188,\"peak_live_bytes\":26107392,[^\n]*\"resource\":\"pool\",[^\n]*\"trace\":\"<stdin>\",")
add_test(NAME cli_stdin_replay_gzip
  COMMAND sh -c "command -v gzip >/dev/null || { echo 'gzip not found: skipped'; exit 77; }; gzip -c \"$1\" | \"$0\" replay - --resource exact"
          ${_cli} ${_small})
set_tests_properties(cli_stdin_replay_gzip PROPERTIES LABELS cpu SKIP_RETURN_CODE 77
  PASS_REGULAR_EXPRESSION "\n<stdin> +exact +1188 ")
add_test(NAME cli_stdin_doctor
  COMMAND sh -c "\"$0\" doctor --json --no-replay - < \"$1\"" ${_cli} ${_small})
set_tests_properties(cli_stdin_doctor PROPERTIES LABELS cpu
  PASS_REGULAR_EXPRESSION "^\\{\"trace\":\"<stdin>\",\"rows\":1188,")
add_test(NAME cli_stdin_doctor_pinned
  COMMAND sh -c "\"$0\" doctor --json --no-replay \"$1\" --pinned - < \"$2\"" ${_cli} ${_small}
          ${PROJECT_SOURCE_DIR}/examples/pinned_host.csv)
set_tests_properties(cli_stdin_doctor_pinned PROPERTIES LABELS cpu
  PASS_REGULAR_EXPRESSION "\"pinned_trace\":\"<stdin>\",.*\"id\":\"pinned-memory\"")
add_test(NAME cli_stdin_report
  COMMAND sh -c "\"$0\" report - --no-doctor-replay -o \"$2\" < \"$1\"" ${_cli} ${_small}
          ${CMAKE_CURRENT_BINARY_DIR}/report_stdin.html)
set_tests_properties(cli_stdin_report PROPERTIES LABELS cpu
  PASS_REGULAR_EXPRESSION "^<stdin>: peak live [^\n]* -> [^\n]*report_stdin.html\n$")
add_test(NAME cli_stdin_bench_replay
  COMMAND sh -c "\"$0\" bench replay --simulate --reps 1 --allocator gpumem-sim --traces - --json < \"$1\"" ${_cli} ${_small})
set_tests_properties(cli_stdin_bench_replay PROPERTIES LABELS cpu
  PASS_REGULAR_EXPRESSION "^\\{\"pattern\":\"replay\",\"allocator\":\"gpumem-sim\",[^\n]*\"trace\":\"<stdin>\"")
# A bad row read from standard input is placed like a file's.
add_test(NAME cli_stdin_bad_row
  COMMAND sh -c "\"$0\" replay - < \"$1\" 2>&1 >/dev/null; echo \"exit $?\"" ${_cli}
          ${CMAKE_CURRENT_LIST_DIR}/data/bad_action.csv)
set_tests_properties(cli_stdin_bad_row PROPERTIES LABELS cpu
  PASS_REGULAR_EXPRESSION "^gpumem replay: error: <stdin>:3: unknown action `release`[^\n]*\nexit 2\n$")
# Standard input can be read once.
add_test(NAME cli_stdin_named_twice
  COMMAND sh -c "\"$0\" replay - - < \"$1\" 2>&1; echo \"exit $?\"" ${_cli} ${_small})
set_tests_properties(cli_stdin_named_twice PROPERTIES LABELS cpu
  PASS_REGULAR_EXPRESSION "^gpumem replay: error: `-` \\(standard input\\) is named more than once[^\n]*\nexit 2\n$")
