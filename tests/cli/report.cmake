# `gpumem report`: the CLI writes a page, and (label `browser`) headless Chromium draws it without
# errors. The browser test keeps its screenshot in the build folder (report_screenshot.png, a CI
# artifact) and is SKIPPED (exit 77) where Chromium is not installed.
add_test(NAME cli_report_writes_html
  COMMAND $<TARGET_FILE:gpumem_cli> report ${PROJECT_SOURCE_DIR}/examples/small_training.csv
          -o ${CMAKE_BINARY_DIR}/report_small_training.html --no-doctor-replay)
set_tests_properties(cli_report_writes_html PROPERTIES LABELS cpu
  PASS_REGULAR_EXPRESSION "small_training.csv: peak live .* -> .*report_small_training.html")

add_test(NAME cli_report_bad_trace_fails
  COMMAND $<TARGET_FILE:gpumem_cli> report ${CMAKE_CURRENT_LIST_DIR}/data/bad_action.csv
          -o ${CMAKE_BINARY_DIR}/report_bad.html)
set_tests_properties(cli_report_bad_trace_fails PROPERTIES LABELS cpu WILL_FAIL TRUE)

add_test(NAME browser_report_varlen_inference
  COMMAND ${PROJECT_SOURCE_DIR}/tests/browser/check_report.sh $<TARGET_FILE:gpumem_cli>
          ${PROJECT_SOURCE_DIR}/examples/varlen_inference.csv ${CMAKE_BINARY_DIR} report)
set_tests_properties(browser_report_varlen_inference PROPERTIES LABELS browser SKIP_RETURN_CODE 77 TIMEOUT 300)
