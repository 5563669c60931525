# `gpumem convert TRACE --to perfetto -o OUT.json`: writes the file and says what it holds; an
# unknown format is refused.
add_test(NAME cli_convert_perfetto
  COMMAND $<TARGET_FILE:gpumem_cli> convert ${PROJECT_SOURCE_DIR}/examples/vision_two_streams.csv
          --to perfetto -o ${CMAKE_BINARY_DIR}/vision_two_streams.perfetto.json)
set_tests_properties(cli_convert_perfetto PROPERTIES LABELS cpu
  PASS_REGULAR_EXPRESSION "vision_two_streams.csv: [0-9]+ events \\(929 allocations on [0-9]+ stream tracks; live and reserved bytes\\) -> ")
add_test(NAME cli_convert_unknown_format_fails
  COMMAND $<TARGET_FILE:gpumem_cli> convert ${PROJECT_SOURCE_DIR}/examples/small_training.csv
          --to chrome -o ${CMAKE_BINARY_DIR}/never.json)
set_tests_properties(cli_convert_unknown_format_fails PROPERTIES LABELS cpu WILL_FAIL TRUE)
