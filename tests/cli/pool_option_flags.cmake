# The pool's flags on `gpumem replay`: the public options (gpumem::pool_options) are taken; the pool
# policy's settings are no flags, and replay given one says which flags the pool takes. `gpumem
# bench` measures the default only: it takes no pool flag at all.
set(_pof_trace ${PROJECT_SOURCE_DIR}/examples/varlen_inference.csv)

add_test(NAME cli_replay_pool_options_taken
  COMMAND $<TARGET_FILE:gpumem_cli> replay ${_pof_trace} --max-reserved-bytes 8G --initial-reserve 64M --json)
set_tests_properties(cli_replay_pool_options_taken PROPERTIES LABELS cpu
  PASS_REGULAR_EXPRESSION "\"failed_allocs\":0,.*\"peak_reserved_bytes\":[1-9][0-9]*")
add_test(NAME cli_replay_max_reserved_bytes_bad_value_message
  COMMAND $<TARGET_FILE:gpumem_cli> replay ${_pof_trace} --max-reserved-bytes junk)
set_tests_properties(cli_replay_max_reserved_bytes_bad_value_message PROPERTIES LABELS cpu
  PASS_REGULAR_EXPRESSION "--max-reserved-bytes: 'junk' is not a byte size")

foreach(_cmd replay)
  set(_base replay ${_pof_trace})
  foreach(_flag --idle-budget=0.1 --grow-before-reclaim --no-front-cache --front-cache-bytes=4M --reserve-ceiling=1.5
                --max-handle-bytes=8M --remap-time-budget=0.05 --no-stream-ordered-moves --min-segment-bytes=4M)
    string(REGEX REPLACE "^--([a-z-]+).*" "\\1" _name "${_flag}")
    add_test(NAME cli_${_cmd}_refuses_policy_flag_${_name}
      COMMAND sh -c "\"$0\" \"$@\" 2>&1 >/dev/null; echo \"exit $?\"" $<TARGET_FILE:gpumem_cli> ${_base} ${_flag})
    set_tests_properties(cli_${_cmd}_refuses_policy_flag_${_name} PROPERTIES LABELS cpu
      PASS_REGULAR_EXPRESSION "^gpumem ${_cmd}: error: The following argument was not expected: --${_name}[^\n]* \\(its pool options: --small-max-bytes, --release-threshold-bytes, --max-reserved-bytes, --zero-on-free, --initial-reserve-bytes; `gpumem options` lists them\\)\nexit 2\n$")
  endforeach()
endforeach()

foreach(_flag --max-reserved-bytes=8G --idle-budget=0.1)
  string(REGEX REPLACE "^--([a-z-]+).*" "\\1" _name "${_flag}")
  add_test(NAME cli_bench_takes_no_pool_flag_${_name}
    COMMAND sh -c "\"$0\" \"$@\" 2>&1 >/dev/null; echo \"exit $?\"" $<TARGET_FILE:gpumem_cli> bench pair --simulate --reps 1 ${_flag})
  set_tests_properties(cli_bench_takes_no_pool_flag_${_name} PROPERTIES LABELS cpu
    PASS_REGULAR_EXPRESSION "^gpumem bench: error: The following argument was not expected: --${_name}")
endforeach()
