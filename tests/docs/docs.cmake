# The docs' own checks. bench/RESULTS.md is generated from bench/results/*.jsonl by
# scripts/results_md.py: the committed file must be exactly what the script makes of the committed
# runs, and the script itself is tested on runs made up in a temporary folder. The README's first
# C++ example is compiled and run (readme_example.cpp), and must be the README's text.
# Standard-library Python; the Python tests skip (77) without python3.
add_test(NAME docs_results_md_current
  COMMAND sh -c "${GPUMEM_PYTHON3} scripts/results_md.py --check"
  WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
add_test(NAME docs_results_md_script
  COMMAND sh -c "${GPUMEM_PYTHON3} -m unittest -v test_results_md"
  WORKING_DIRECTORY ${PROJECT_SOURCE_DIR}/tests/docs)
add_test(NAME docs_readme_example_text
  COMMAND sh -c "${GPUMEM_PYTHON3} -m unittest -v test_readme"
  WORKING_DIRECTORY ${PROJECT_SOURCE_DIR}/tests/docs)
set_tests_properties(docs_results_md_current docs_results_md_script docs_readme_example_text
  PROPERTIES LABELS cpu SKIP_RETURN_CODE 77)

add_executable(gpumem_readme_example ${CMAKE_CURRENT_LIST_DIR}/readme_example.cpp)
target_link_libraries(gpumem_readme_example PRIVATE gpumem)
gpumem_warnings(gpumem_readme_example)
add_test(NAME docs_readme_example COMMAND gpumem_readme_example)
set_tests_properties(docs_readme_example PROPERTIES LABELS cpu)
