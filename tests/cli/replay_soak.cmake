# `gpumem replay` as a soak with integrity checks (--ops, --verify-every) on the simulated device,
# and its bad input refused with a message naming the option and what is wrong.
set(_soak_trace ${PROJECT_SOURCE_DIR}/examples/small_training.csv)

# 10^4 ops of a 1,188-op trace: 9 passes, every 4th block verified, nothing wrong.
add_test(NAME cli_replay_soak_json
  COMMAND $<TARGET_FILE:gpumem_cli> replay ${_soak_trace} --ops 1e4 --verify-every 4 --json)
set_tests_properties(cli_replay_soak_json PROPERTIES LABELS cpu
  PASS_REGULAR_EXPRESSION "\"integrity_mismatches\":0,.*\"mismatched_words\":0,.*\"ops\":10692,\"overlap_checks\":5346,\"overlaps\":0,\"pass_log\":\\[\\{.*\"passes\":9,.*\"verified_blocks\":1337,\"verify_every\":4")
# PASS_REGULAR_EXPRESSION ignores the exit code: a clean soak also exits 0.
add_test(NAME cli_replay_soak_exit_ok
  COMMAND $<TARGET_FILE:gpumem_cli> replay ${_soak_trace} --passes 3 --verify-every 1)
set_tests_properties(cli_replay_soak_exit_ok PROPERTIES LABELS cpu)
add_test(NAME cli_replay_soak_table
  COMMAND $<TARGET_FILE:gpumem_cli> replay ${_soak_trace} --resource pool-segments --passes 3 --verify-every 1)
set_tests_properties(cli_replay_soak_table PROPERTIES LABELS cpu
  PASS_REGULAR_EXPRESSION "soak: 3 passes, 3564 ops; peak reserved after pass 1 [0-9]+ B, in later passes [0-9]+ B: growth [+-][0-9.]+%\n  integrity: 1782 blocks checked for overlap and alignment, 1782 verified \\(every allocation\\); overlaps 0, misaligned 0, mismatched words 0: ok")

# Bad input: each exits non-zero, and says why.
foreach(_case "ops_zero;--ops;0;'0' must be at least 1"
              "ops_fraction;--ops;2.5;'2.5' is not a count \\(not whole\\)"
              "verify_negative;--verify-every;-5;'-5' is not a count \\(negative\\)"
              "verify_garbage;--verify-every;abc;'abc' is not a count \\(not a number\\)")
  list(GET _case 0 _name)
  list(GET _case 1 _option)
  list(GET _case 2 _value)
  list(GET _case 3 _message)
  add_test(NAME cli_replay_bad_${_name}_fails
    COMMAND $<TARGET_FILE:gpumem_cli> replay ${_soak_trace} ${_option} ${_value})
  set_tests_properties(cli_replay_bad_${_name}_fails PROPERTIES LABELS cpu WILL_FAIL TRUE)
  add_test(NAME cli_replay_bad_${_name}_message
    COMMAND $<TARGET_FILE:gpumem_cli> replay ${_soak_trace} ${_option} ${_value})
  set_tests_properties(cli_replay_bad_${_name}_message PROPERTIES LABELS cpu
    PASS_REGULAR_EXPRESSION "${_option}: ${_message}")
endforeach()
add_test(NAME cli_replay_ops_and_passes_fails
  COMMAND $<TARGET_FILE:gpumem_cli> replay ${_soak_trace} --ops 1e4 --passes 3)
set_tests_properties(cli_replay_ops_and_passes_fails PROPERTIES LABELS cpu WILL_FAIL TRUE)

# `gpumem replay --settle`: the soak settles between passes and replays them all (what settling
# does to the reserve: pool_settle_test.cpp, through replay_options::settle_between_passes).
add_test(NAME cli_replay_settle_between_passes
  COMMAND $<TARGET_FILE:gpumem_cli> replay ${PROJECT_SOURCE_DIR}/examples/vision_two_streams.csv
          --passes 3 --settle --json)
set_tests_properties(cli_replay_settle_between_passes PROPERTIES LABELS cpu
  PASS_REGULAR_EXPRESSION "\"failed_allocs\":0,.*\"pass\":3,.*\"soak_growth\":")

# Flags that left no decision to a user are gone: two served one device experiment each, and
# --simulate changed nothing (the resource says where a replay runs).
foreach(_flag --host-probe --trace-clock --simulate)
  add_test(NAME cli_replay_no${_flag}
    COMMAND sh -c "\"$0\" replay \"$1\" --passes 2 \"$2\" 2>&1; echo \"exit $?\"" $<TARGET_FILE:gpumem_cli> ${_soak_trace} ${_flag})
  set_tests_properties(cli_replay_no${_flag} PROPERTIES LABELS cpu
    PASS_REGULAR_EXPRESSION "gpumem replay: error: [^\n]*${_flag}[^\n]*\nexit 2\n$")
endforeach()
