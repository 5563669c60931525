# bench/RESULTS.md is generated from bench/results/*.jsonl by scripts/results_md.py: the committed
# file must be exactly what the script makes of the committed runs, and the script itself is tested
# on runs made up in a temporary folder. Standard-library Python; skipped (77) without python3.
add_test(NAME results_md_current
  COMMAND sh -c "command -v python3 >/dev/null 2>&1 || { echo 'python3 not found: skipped'; exit 77; }; exec python3 scripts/results_md.py --check"
  WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
set_tests_properties(results_md_current PROPERTIES LABELS cpu SKIP_RETURN_CODE 77)

add_test(NAME results_md_script
  COMMAND sh -c "command -v python3 >/dev/null 2>&1 || { echo 'python3 not found: skipped'; exit 77; }; exec python3 -m unittest -v test_results_md"
  WORKING_DIRECTORY ${PROJECT_SOURCE_DIR}/tests/docs)
set_tests_properties(results_md_script PROPERTIES LABELS cpu SKIP_RETURN_CODE 77)
