# `--grow-before-reclaim` and `--max-handle-bytes` on `gpumem replay` (`gpumem bench` runs the defaults only).
set(_gbr_trace ${PROJECT_SOURCE_DIR}/examples/varlen_inference.csv)

add_test(NAME cli_replay_grow_before_reclaim
  COMMAND $<TARGET_FILE:gpumem_cli> replay ${_gbr_trace} --grow-before-reclaim --json)
set_tests_properties(cli_replay_grow_before_reclaim PROPERTIES LABELS cpu
  PASS_REGULAR_EXPRESSION "\"failed_allocs\":0,.*\"peak_reserved_bytes\":[1-9][0-9]*")

# The flag takes true/false at most: anything else exits non-zero and names the option.
add_test(NAME cli_replay_grow_before_reclaim_bad_value_fails
  COMMAND $<TARGET_FILE:gpumem_cli> replay ${_gbr_trace} --grow-before-reclaim=maybe)
set_tests_properties(cli_replay_grow_before_reclaim_bad_value_fails PROPERTIES LABELS cpu WILL_FAIL TRUE)
add_test(NAME cli_replay_grow_before_reclaim_bad_value_message
  COMMAND $<TARGET_FILE:gpumem_cli> replay ${_gbr_trace} --grow-before-reclaim=maybe)
set_tests_properties(cli_replay_grow_before_reclaim_bad_value_message PROPERTIES LABELS cpu
  PASS_REGULAR_EXPRESSION "Could not convert: --grow-before-reclaim = maybe")

# `--max-handle-bytes` (pool_options::max_handle_bytes) on both, and a bad size named as such.
add_test(NAME cli_replay_max_handle_bytes
  COMMAND $<TARGET_FILE:gpumem_cli> replay ${_gbr_trace} --max-handle-bytes 8M --json)
set_tests_properties(cli_replay_max_handle_bytes PROPERTIES LABELS cpu
  PASS_REGULAR_EXPRESSION "\"failed_allocs\":0,.*\"peak_reserved_bytes\":[1-9][0-9]*")
add_test(NAME cli_replay_max_handle_bytes_bad_value_message
  COMMAND $<TARGET_FILE:gpumem_cli> replay ${_gbr_trace} --max-handle-bytes junk)
set_tests_properties(cli_replay_max_handle_bytes_bad_value_message PROPERTIES LABELS cpu
  PASS_REGULAR_EXPRESSION "--max-handle-bytes: 'junk' is not a byte size")
