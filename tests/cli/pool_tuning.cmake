# `--reserve-ceiling`, `--front-cache-bytes` and `--[no-]front-cache` on `gpumem replay`.
set(_pt_trace ${PROJECT_SOURCE_DIR}/examples/varlen_inference.csv)

# A device 50 operations behind with a large idle budget reserves well over 1.03x peak live; a
# ceiling of 1.03 brings it under 1.03.
add_test(NAME cli_replay_reserve_ceiling
  COMMAND $<TARGET_FILE:gpumem_cli> replay ${_pt_trace} --device-lag 50 --idle-budget 0.25 --reserve-ceiling 1.03 --json)
set_tests_properties(cli_replay_reserve_ceiling PROPERTIES LABELS cpu
  PASS_REGULAR_EXPRESSION "\"fragmentation\":1\\.0[0-2][0-9]*,")
add_test(NAME cli_replay_reserve_ceiling_below_one_fails
  COMMAND $<TARGET_FILE:gpumem_cli> replay ${_pt_trace} --reserve-ceiling 0.5)
set_tests_properties(cli_replay_reserve_ceiling_below_one_fails PROPERTIES LABELS cpu WILL_FAIL TRUE)
add_test(NAME cli_replay_reserve_ceiling_below_one_message
  COMMAND $<TARGET_FILE:gpumem_cli> replay ${_pt_trace} --reserve-ceiling 0.5)
set_tests_properties(cli_replay_reserve_ceiling_below_one_message PROPERTIES LABELS cpu
  PASS_REGULAR_EXPRESSION "--reserve-ceiling: .0.5. is not 0 \\(none\\) or a multiple of peak live >= 1")

# Without front caches nothing is served from one.
add_test(NAME cli_replay_no_front_cache
  COMMAND $<TARGET_FILE:gpumem_cli> replay ${_pt_trace} --no-front-cache --json)
set_tests_properties(cli_replay_no_front_cache PROPERTIES LABELS cpu PASS_REGULAR_EXPRESSION "\"front_hits\":0,")
add_test(NAME cli_replay_front_cache_bytes_bad_message
  COMMAND $<TARGET_FILE:gpumem_cli> replay ${_pt_trace} --front-cache-bytes lots)
set_tests_properties(cli_replay_front_cache_bytes_bad_message PROPERTIES LABELS cpu
  PASS_REGULAR_EXPRESSION "--front-cache-bytes: 'lots' is not a byte size")
add_test(NAME cli_replay_front_cache_bytes_bad_fails
  COMMAND $<TARGET_FILE:gpumem_cli> replay ${_pt_trace} --front-cache-bytes lots)
set_tests_properties(cli_replay_front_cache_bytes_bad_fails PROPERTIES LABELS cpu WILL_FAIL TRUE)
