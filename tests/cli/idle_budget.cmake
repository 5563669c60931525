# `--idle-budget` on `gpumem replay` (`gpumem bench` runs the defaults only), and the soak's per-pass
# slow-path figures.
set(_ib_trace ${PROJECT_SOURCE_DIR}/examples/varlen_inference.csv)

# Each pass of a soak says what the slow path has done so far (granules moved, map/unmap calls) and when.
add_test(NAME cli_replay_pass_log_slow_path
  COMMAND $<TARGET_FILE:gpumem_cli> replay ${_ib_trace} --passes 2 --idle-budget 0.25 --json)
set_tests_properties(cli_replay_pass_log_slow_path PROPERTIES LABELS cpu
  PASS_REGULAR_EXPRESSION "\"pass_log\":\\[\\{\"driver_granules\":[1-9][0-9]*,\"granules_moved\":[1-9][0-9]*,\"integrity_mismatches\":0,\"map_unmap_calls\":[1-9][0-9]*,\"pass\":1,.*\"seconds\":[0-9.e+-]+\\},\\{\"driver_granules\":[1-9][0-9]*,\"granules_moved\":[1-9][0-9]*,.*\"pass\":2,")

# Bad budgets: each command exits non-zero and names the option.
foreach(_cmd replay)
  foreach(_case "negative;-0.5;'-0.5' is not a fraction >= 0" "garbage;lots;'lots' is not a number")
    list(GET _case 0 _name)
    list(GET _case 1 _value)
    list(GET _case 2 _message)
    set(_args replay ${_ib_trace} --idle-budget ${_value})
    add_test(NAME cli_${_cmd}_idle_budget_${_name}_fails COMMAND $<TARGET_FILE:gpumem_cli> ${_args})
    set_tests_properties(cli_${_cmd}_idle_budget_${_name}_fails PROPERTIES LABELS cpu WILL_FAIL TRUE)
    add_test(NAME cli_${_cmd}_idle_budget_${_name}_message COMMAND $<TARGET_FILE:gpumem_cli> ${_args})
    set_tests_properties(cli_${_cmd}_idle_budget_${_name}_message PROPERTIES LABELS cpu
      PASS_REGULAR_EXPRESSION "--idle-budget: ${_message}")
  endforeach()
endforeach()
