# `gpumem doctor` run as a user would: JSON on a bundled example, and bad input refused.
set(_doctor_examples ${PROJECT_SOURCE_DIR}/examples)

# The pitfalls example: every planted problem is reported, costliest first: the failures (the job
# fails) as an error at the top, each finding with its cost.
add_test(NAME cli_doctor_json_pitfalls
  COMMAND $<TARGET_FILE:gpumem_cli> doctor --json ${_doctor_examples}/pitfalls.csv)
set_tests_properties(cli_doctor_json_pitfalls PROPERTIES LABELS cpu
  PASS_REGULAR_EXPRESSION "\"findings\":\\[\\{\"id\":\"alloc-failure\",\"severity\":\"error\",\"summary\":\"[^\"]*\",\"cost\":\\{\"bytes\":[^}]*\"share\":1\\.0\\}.*\"id\":\"leak\".*\"id\":\"cross-stream-free\"")

# PASS_REGULAR_EXPRESSION ignores the exit code, so check it on its own: findings are not a failure.
add_test(NAME cli_doctor_exit_ok_with_findings
  COMMAND $<TARGET_FILE:gpumem_cli> doctor --json ${_doctor_examples}/pitfalls.csv)
set_tests_properties(cli_doctor_exit_ok_with_findings PROPERTIES LABELS cpu)

# The clean example: nothing above info, fragmentation and remapping judged too.
add_test(NAME cli_doctor_json_clean
  COMMAND $<TARGET_FILE:gpumem_cli> doctor --json ${_doctor_examples}/small_training.csv)
set_tests_properties(cli_doctor_json_clean PROPERTIES LABELS cpu
  PASS_REGULAR_EXPRESSION "^\\{\"trace\":\"[^\"]*small_training.csv\",\"rows\":1188,.*\"worst_severity\":\"info\",\"findings\":\\[")

# Bad input: exits non-zero ...
add_test(NAME cli_doctor_bad_trace_fails
  COMMAND $<TARGET_FILE:gpumem_cli> doctor ${CMAKE_CURRENT_LIST_DIR}/data/bad_action.csv)
set_tests_properties(cli_doctor_bad_trace_fails PROPERTIES LABELS cpu WILL_FAIL TRUE)
# ... with the reader's file:line message.
add_test(NAME cli_doctor_bad_trace_message
  COMMAND $<TARGET_FILE:gpumem_cli> doctor ${CMAKE_CURRENT_LIST_DIR}/data/bad_action.csv)
set_tests_properties(cli_doctor_bad_trace_message PROPERTIES LABELS cpu
  PASS_REGULAR_EXPRESSION "bad_action.csv:3: unknown action `release`")
add_test(NAME cli_doctor_missing_file_fails
  COMMAND $<TARGET_FILE:gpumem_cli> doctor ${CMAKE_CURRENT_LIST_DIR}/data/no_such_trace.csv)
set_tests_properties(cli_doctor_missing_file_fails PROPERTIES LABELS cpu WILL_FAIL TRUE)

# Former false alarms, through the CLI with its replays. Live memory far under a granule: an info
# line says fragmentation is not meaningful, and nothing is above info (it once read as an error of
# 32,768x).
add_test(NAME cli_doctor_tiny_live_memory
  COMMAND $<TARGET_FILE:gpumem_cli> doctor ${CMAKE_CURRENT_LIST_DIR}/data/tiny_live.csv)
set_tests_properties(cli_doctor_tiny_live_memory PROPERTIES LABELS cpu
  PASS_REGULAR_EXPRESSION "info     fragmentation +\\[no cost\\] live memory under 4 granules: fragmentation is not meaningful at this size"
  FAIL_REGULAR_EXPRESSION "(error|warning)  ")
# A pool that only grows (the pinned example read as a device trace: every granule mapped once,
# none unmapped) raises no slow-path-remapping.
add_test(NAME cli_doctor_growth_is_not_remapping
  COMMAND $<TARGET_FILE:gpumem_cli> doctor ${_doctor_examples}/pinned_host.csv)
set_tests_properties(cli_doctor_growth_is_not_remapping PROPERTIES LABELS cpu
  PASS_REGULAR_EXPRESSION "info     fragmentation"
  FAIL_REGULAR_EXPRESSION "slow-path-remapping")
