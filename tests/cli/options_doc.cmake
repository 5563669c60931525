# docs/options.md is generated from the pool option table (`gpumem options --markdown`): this test
# fails when the two differ, so the page cannot drift from the table.
add_test(NAME cli_options_doc_up_to_date
  COMMAND ${CMAKE_COMMAND} -DGPUMEM_CLI=$<TARGET_FILE:gpumem_cli> -DDOC=${PROJECT_SOURCE_DIR}/docs/options.md
          -P ${CMAKE_CURRENT_LIST_DIR}/data/check_options_doc.cmake)
set_tests_properties(cli_options_doc_up_to_date PROPERTIES LABELS cpu)

# The plain listing: each option with its kind, default and flags.
add_test(NAME cli_options_lists_defaults COMMAND $<TARGET_FILE:gpumem_cli> options)
set_tests_properties(cli_options_lists_defaults PROPERTIES LABELS cpu
  PASS_REGULAR_EXPRESSION "^small_max_bytes +bytes +default 1M +--small-max-bytes\n.*\nzero_on_free +flag +default off +--zero-on-free,--no-zero-on-free\n")
