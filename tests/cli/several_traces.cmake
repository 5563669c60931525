# replay, doctor and report treat several traces alike: a bad one is reported, the others still
# run, and the exit code says at the end that one failed.
set(_cli $<TARGET_FILE:gpumem_cli>)
set(_bad ${CMAKE_CURRENT_LIST_DIR}/data/bad_action.csv)
set(_small ${PROJECT_SOURCE_DIR}/examples/small_training.csv)
set(_varlen ${PROJECT_SOURCE_DIR}/examples/varlen_inference.csv)

add_test(NAME cli_several_replay_bad_one_between
  COMMAND sh -c "\"$0\" replay --json \"$@\" 2>&1; echo \"exit $?\"" ${_cli} ${_small} ${_bad} ${_varlen})
set_tests_properties(cli_several_replay_bad_one_between PROPERTIES LABELS cpu
  PASS_REGULAR_EXPRESSION "\"trace\":\"[^\"]*small_training.csv\"[^\n]*\ngpumem replay: error: [^\n]*bad_action.csv:3: [^\n]*\n[^\n]*\"trace\":\"[^\"]*varlen_inference.csv\"[^\n]*\nexit 2\n$")
add_test(NAME cli_several_doctor_bad_one_between
  COMMAND sh -c "\"$0\" doctor --json --no-replay \"$@\" 2>&1; echo \"exit $?\"" ${_cli} ${_small} ${_bad} ${_varlen})
set_tests_properties(cli_several_doctor_bad_one_between PROPERTIES LABELS cpu
  PASS_REGULAR_EXPRESSION "\"trace\":\"[^\"]*small_training.csv\"[^\n]*\ngpumem doctor: error: [^\n]*bad_action.csv:3: [^\n]*\n\\{\"trace\":\"[^\"]*varlen_inference.csv\"[^\n]*\nexit 2\n$")
# report: several traces, a page each in the folder -o names, named after the trace.
set(_pages ${CMAKE_CURRENT_BINARY_DIR}/report_pages)
add_test(NAME cli_several_report_bad_one_between
  COMMAND sh -c "rm -rf \"$1\" && mkdir -p \"$1\" && \"$0\" report --no-doctor-replay -o \"$1\" \"$2\" \"$3\" \"$4\" 2>&1; echo \"exit $?\"; ls \"$1\""
          ${_cli} ${_pages} ${_small} ${_bad} ${_varlen})
set_tests_properties(cli_several_report_bad_one_between PROPERTIES LABELS cpu
  PASS_REGULAR_EXPRESSION "small_training.csv: peak live [^\n]*small_training.html\ngpumem report: error: [^\n]*bad_action.csv:3: [^\n]*\n[^\n]*varlen_inference.csv: peak live [^\n]*varlen_inference.html\nexit 2\nsmall_training.html\nvarlen_inference.html\n$")
# Two traces whose pages would take one name are refused before anything runs.
add_test(NAME cli_several_report_clashing_pages
  COMMAND sh -c "\"$0\" report -o \"$1\" \"$2\" \"$2\" 2>&1; echo \"exit $?\"" ${_cli} ${CMAKE_CURRENT_BINARY_DIR} ${_small})
set_tests_properties(cli_several_report_clashing_pages PROPERTIES LABELS cpu
  PASS_REGULAR_EXPRESSION "^gpumem report: error: [^\n]* would both be written to small_training.html[^\n]*\nexit 2\n$")

# replay's table: the trace's own `allocate failure` rows beside the replay's failures (the pitfalls
# example has some; on an 80G device the replay serves every request).
add_test(NAME cli_replay_table_trace_failures
  COMMAND ${_cli} replay ${PROJECT_SOURCE_DIR}/examples/pitfalls.csv --resource exact)
set_tests_properties(cli_replay_table_trace_failures PROPERTIES LABELS cpu
  PASS_REGULAR_EXPRESSION "frag +ns/op +failed +trace_failed\n[^\n]*pitfalls.csv +exact +[0-9]+ +[0-9]+ +[0-9]+ +[0-9.]+ +[0-9.]+ +0 +[1-9][0-9]*\n")
