# `--remap-time-budget` and `--remap-cost-us` on `gpumem replay`: the moves the budget turned down
# and the host time it charged are in the JSON and in the table; a budget over 1 is refused by name.
set(_rb_trace ${PROJECT_SOURCE_DIR}/examples/varlen_inference.csv)

add_test(NAME cli_replay_remap_time_budget_json
  COMMAND $<TARGET_FILE:gpumem_cli> replay ${_rb_trace} --remap-time-budget 0.05 --remap-cost-us 36 --json)
set_tests_properties(cli_replay_remap_time_budget_json PROPERTIES LABELS cpu
  PASS_REGULAR_EXPRESSION "\"remap_ms\":[0-9.]*[1-9][0-9.e+-]*,\"remaps_deferred\":[1-9][0-9]*")

add_test(NAME cli_replay_remap_time_budget_table
  COMMAND $<TARGET_FILE:gpumem_cli> replay ${_rb_trace} --remap-time-budget 0.05 --remap-cost-us 36)
set_tests_properties(cli_replay_remap_time_budget_table PROPERTIES LABELS cpu
  PASS_REGULAR_EXPRESSION "remap time budget: [0-9.]+ ms charged for moves, [1-9][0-9]* moves turned down")

add_test(NAME cli_replay_remap_time_budget_over_1_fails
  COMMAND $<TARGET_FILE:gpumem_cli> replay ${_rb_trace} --remap-time-budget 1.5)
set_tests_properties(cli_replay_remap_time_budget_over_1_fails PROPERTIES LABELS cpu WILL_FAIL TRUE)
add_test(NAME cli_replay_remap_time_budget_over_1_message
  COMMAND $<TARGET_FILE:gpumem_cli> replay ${_rb_trace} --remap-time-budget 1.5)
set_tests_properties(cli_replay_remap_time_budget_over_1_message PROPERTIES LABELS cpu
  PASS_REGULAR_EXPRESSION "--remap-time-budget: .1.5. is not a fraction of wall time in \\[0, 1\\]")
