# `gpumem --version`, `gpumem help [CMD]`, and every subcommand's --help: an example in its footer,
# and defaults shown as they are.
set(_cli $<TARGET_FILE:gpumem_cli>)

# The version is the project's, from CMake.
add_test(NAME cli_version COMMAND ${_cli} --version)
set_tests_properties(cli_version PROPERTIES LABELS cpu PASS_REGULAR_EXPRESSION "^gpumem ${PROJECT_VERSION}\n$")

# `gpumem help`: the whole tool, every command listed; `gpumem help CMD`: that command's own help.
add_test(NAME cli_help_lists_the_commands COMMAND ${_cli} help)
set_tests_properties(cli_help_lists_the_commands PROPERTIES LABELS cpu
  PASS_REGULAR_EXPRESSION "Usage: gpumem \\[OPTIONS\\] SUBCOMMAND.*bench .*doctor .*replay .*report ")
add_test(NAME cli_help_one_command COMMAND ${_cli} help doctor)
set_tests_properties(cli_help_one_command PROPERTIES LABELS cpu
  PASS_REGULAR_EXPRESSION "Usage: gpumem doctor \\[OPTIONS\\] traces.*--no-replay")
# An unknown command is an error: exit 2, naming it and the commands there are.
add_test(NAME cli_help_unknown_command
  COMMAND sh -c "\"$0\" help frobnicate; echo \"exit $?\"" ${_cli})
set_tests_properties(cli_help_unknown_command PROPERTIES LABELS cpu
  PASS_REGULAR_EXPRESSION "gpumem help: error: unknown command 'frobnicate' \\(the commands: [^\n]*replay[^\n]*\\)\nexit 2")

# Every subcommand's --help ends with an example of it.
foreach(_cmd bench bench-hierarchy doctor help info options replay report)
  add_test(NAME cli_help_example_${_cmd} COMMAND ${_cli} ${_cmd} --help)
  set_tests_properties(cli_help_example_${_cmd} PROPERTIES LABELS cpu
    PASS_REGULAR_EXPRESSION "Examples?:\n  gpumem ${_cmd}[ \n]")
endforeach()

# Boolean pool options show their real default, never CLI11's "{false}", the value --no-x sets;
# sizes show theirs with a suffix.
foreach(_cmd replay)
  add_test(NAME cli_help_pool_flag_defaults_${_cmd} COMMAND ${_cli} ${_cmd} --help)
  set_tests_properties(cli_help_pool_flag_defaults_${_cmd} PROPERTIES LABELS cpu
    PASS_REGULAR_EXPRESSION "--small-max-bytes BYTES=1M.*--max-reserved-bytes,--max-reserved BYTES=max.*--zero-on-free,--no-zero-on-free \\(default: off\\)"
    FAIL_REGULAR_EXPRESSION "\\{false\\}|\\{true\\}")
endforeach()

# `doctor --no-replay`: its help names what it skips, and the report skips exactly that.
add_test(NAME cli_help_doctor_no_replay_says_what_it_skips COMMAND ${_cli} doctor --help)
set_tests_properties(cli_help_doctor_no_replay_says_what_it_skips PROPERTIES LABELS cpu
  PASS_REGULAR_EXPRESSION "--no-replay +Skip the findings that replay the trace through the pool \\(fragmentation and slow-path-remapping")
add_test(NAME cli_doctor_no_replay_skips_what_its_help_says
  COMMAND ${_cli} doctor --json --no-replay ${PROJECT_SOURCE_DIR}/examples/pitfalls.csv)
set_tests_properties(cli_doctor_no_replay_skips_what_its_help_says PROPERTIES LABELS cpu
  PASS_REGULAR_EXPRESSION "\"skipped\":\\[\"fragmentation: [^\"]*\",\"slow-path-remapping: [^\"]*\"")

# Options with a default show it: bench's pattern, reps, rounds and passes, replay's passes.
add_test(NAME cli_help_bench_defaults COMMAND ${_cli} bench --help)
set_tests_properties(cli_help_bench_defaults PROPERTIES LABELS cpu
  PASS_REGULAR_EXPRESSION "pattern TEXT:\\{[^\n]*\\}=all.*--reps INT:INT in \\[1 - 1000\\]=5.*--rounds INT:INT in \\[1 - 100\\]=1.*--passes INT:INT in \\[2 - 100\\]=3")
add_test(NAME cli_help_replay_defaults COMMAND ${_cli} replay --help)
set_tests_properties(cli_help_replay_defaults PROPERTIES LABELS cpu
  PASS_REGULAR_EXPRESSION "--passes UINT:INT in \\[1 - 100000\\]=1")
