# The soak's per-pass slow-path figures on `gpumem replay`.
set(_ib_trace ${PROJECT_SOURCE_DIR}/examples/varlen_inference.csv)

# Each pass of a soak says what the slow path has done so far (granules moved, map/unmap calls) and when.
add_test(NAME cli_replay_pass_log_slow_path
  COMMAND $<TARGET_FILE:gpumem_cli> replay ${_ib_trace} --passes 2 --json)
set_tests_properties(cli_replay_pass_log_slow_path PROPERTIES LABELS cpu
  PASS_REGULAR_EXPRESSION "\"pass_log\":\\[\\{\"driver_granules\":[1-9][0-9]*,\"granules_moved\":[1-9][0-9]*,\"integrity_mismatches\":0,\"map_unmap_calls\":[1-9][0-9]*,\"pass\":1,.*\"seconds\":[0-9.e+-]+\\},\\{\"driver_granules\":[1-9][0-9]*,\"granules_moved\":[1-9][0-9]*,.*\"pass\":2,")
