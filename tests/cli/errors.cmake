# One error style for every subcommand: `gpumem CMD: error: [FILE:LINE: ]what` on stderr.
set(_cli $<TARGET_FILE:gpumem_cli>)
set(_data ${CMAKE_CURRENT_LIST_DIR}/data)
set(_examples ${PROJECT_SOURCE_DIR}/examples)

function(gpumem_error_test name regex)
  add_test(NAME ${name} COMMAND sh -c "\"$0\" \"$@\" 2>&1 >/dev/null; echo \"exit $?\"" ${_cli} ${ARGN})
  set_tests_properties(${name} PROPERTIES LABELS cpu PASS_REGULAR_EXPRESSION "${regex}")
endfunction()

gpumem_error_test(cli_error_replay_bad_trace
  "^gpumem replay: error: [^\n]*bad_action.csv:3: unknown action `release`[^\n]*\nexit 2\n$"
  replay ${_data}/bad_action.csv)
gpumem_error_test(cli_error_replay_missing_trace
  "^gpumem replay: error: [^\n]*no_such_trace.csv: [^\n]+\nexit 2\n$"
  replay ${_data}/no_such_trace.csv)
gpumem_error_test(cli_error_replay_bad_option
  "^gpumem replay: error: --passes: [^\n]+\nexit 2\n$"
  replay ${_examples}/small_training.csv --passes 0)
gpumem_error_test(cli_error_replay_bad_capacity
  "^gpumem replay: error: --capacity: 'lots' is not a byte size[^\n]*\nexit 2\n$"
  replay ${_examples}/small_training.csv --capacity lots)
gpumem_error_test(cli_error_replay_pool_option
  "^gpumem replay: error: --max-reserved-bytes: '-1' is not a byte size[^\n]*\nexit 2\n$"
  replay ${_examples}/small_training.csv --max-reserved-bytes -1)
gpumem_error_test(cli_error_doctor_bad_trace
  "^gpumem doctor: error: [^\n]*bad_action.csv:3: unknown action `release`[^\n]*\nexit 2\n$"
  doctor ${_data}/bad_action.csv)
gpumem_error_test(cli_error_report_bad_trace
  "^gpumem report: error: [^\n]*bad_action.csv:3: unknown action `release`[^\n]*\nexit 2\n$"
  report ${_data}/bad_action.csv -o ${CMAKE_CURRENT_BINARY_DIR}/report_error.html)
gpumem_error_test(cli_error_bench_no_such_allocator
  "^gpumem bench: error: --allocator: [^\n]+\nexit 2\n$"
  bench pair --simulate --reps 1 --allocator no-such-allocator)
gpumem_error_test(cli_error_bench_bad_trace
  "gpumem bench: error: [^\n]*bad_action.csv:3: unknown action `release`[^\n]*\nexit 2\n$"
  bench replay --simulate --reps 1 --traces ${_data}/bad_action.csv)
gpumem_error_test(cli_error_unknown_command
  "^gpumem: error: unknown command 'frobnicate' \\(the commands: bench, [^\n]*replay[^\n]*\\)\nexit 2\n$"
  frobnicate)
add_test(NAME cli_error_no_command COMMAND sh -c "\"$0\" 2>&1; echo \"exit $?\"" ${_cli})
set_tests_properties(cli_error_no_command PROPERTIES LABELS cpu
  PASS_REGULAR_EXPRESSION "^gpumem: error: no command given \\(the commands: bench, [^\n]*\\); `gpumem help` explains them\nexit 2\n$")
# info needs a GPU; where there is none (or no CUDA layer) it says so in the same style.
gpumem_error_test(cli_error_info_without_a_gpu
  "^(gpumem info: error: [^\n]+\nexit 2|exit 0)\n$"
  info)
