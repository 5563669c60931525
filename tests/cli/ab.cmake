# bench/ab (several builds of gpumem timed in turns in one process; scripts/ab_build.sh builds it
# from git revisions), built here on this tree alone so its sources keep compiling, and run once on
# each pattern: the figures are not checked (timing is for benchmarks), the output's shape and the
# refusals of bad input are.
# The counts on its command line are read by the CLI's parser (src/cli/count_arg.cpp).
add_executable(gpumem_ab ${PROJECT_SOURCE_DIR}/bench/ab/ab_main.cpp ${PROJECT_SOURCE_DIR}/bench/ab/ab_self.cpp
               ${PROJECT_SOURCE_DIR}/bench/ab/ab_self_variant.cpp ${PROJECT_SOURCE_DIR}/src/cli/count_arg.cpp)
target_link_libraries(gpumem_ab PRIVATE gpumem gpumem_analysis fmt::fmt-header-only)
target_include_directories(gpumem_ab PRIVATE ${PROJECT_SOURCE_DIR}/bench/ab ${PROJECT_SOURCE_DIR}/src/cli)
gpumem_warnings(gpumem_ab)

set(_ab_trace ${PROJECT_SOURCE_DIR}/examples/small_training.csv)
add_test(NAME cli_ab_runs_every_pattern
  COMMAND gpumem_ab --windows 4 --layouts 2 --ops 2000 pair:512 pair:16M churn replay:${_ab_trace})
set_tests_properties(cli_ab_runs_every_pattern PROPERTIES LABELS cpu
  PASS_REGULAR_EXPRESSION "1 builds, 4 windows each over 2 layouts, policy growing first.*pair:512\n  this tree +[0-9.]+ \\[ *[0-9.]+\\]  ratio 1\\.000.*pair:16777216\n.*churn\n.*replay:small_training\\.csv\n  this tree +[0-9.]+")
add_test(NAME cli_ab_default_policy
  COMMAND gpumem_ab --windows 3 --layouts 1 --default-policy replay:${_ab_trace})
set_tests_properties(cli_ab_default_policy PROPERTIES LABELS cpu PASS_REGULAR_EXPRESSION "policy default")
add_test(NAME cli_ab_unknown_pattern_fails COMMAND gpumem_ab --windows 3 walk)
set_tests_properties(cli_ab_unknown_pattern_fails PROPERTIES LABELS cpu WILL_FAIL TRUE)
add_test(NAME cli_ab_unknown_pattern_says_why COMMAND gpumem_ab --windows 3 walk)
set_tests_properties(cli_ab_unknown_pattern_says_why PROPERTIES LABELS cpu PASS_REGULAR_EXPRESSION "ab: unknown pattern walk")
add_test(NAME cli_ab_missing_trace_says_why COMMAND gpumem_ab --windows 3 replay:${PROJECT_SOURCE_DIR}/no/such.csv)
set_tests_properties(cli_ab_missing_trace_says_why PROPERTIES LABELS cpu PASS_REGULAR_EXPRESSION "ab: .*no/such\\.csv")
add_test(NAME cli_ab_too_few_windows_fails COMMAND gpumem_ab --windows 2 pair:512)
set_tests_properties(cli_ab_too_few_windows_fails PROPERTIES LABELS cpu WILL_FAIL TRUE)
# Counts: a bad one is refused with the reason, not read as a default (--layouts abc was 1).
add_test(NAME cli_ab_bad_layouts_says_why COMMAND gpumem_ab --windows 3 --layouts abc pair:512)
set_tests_properties(cli_ab_bad_layouts_says_why PROPERTIES LABELS cpu
  PASS_REGULAR_EXPRESSION "ab: 'abc' is not a count \\(not a number\\)")
add_test(NAME cli_ab_zero_layouts_fails COMMAND gpumem_ab --windows 3 --layouts 0 pair:512)
set_tests_properties(cli_ab_zero_layouts_fails PROPERTIES LABELS cpu WILL_FAIL TRUE)
add_test(NAME cli_ab_zero_layouts_says_why COMMAND gpumem_ab --windows 3 --layouts 0 pair:512)
set_tests_properties(cli_ab_zero_layouts_says_why PROPERTIES LABELS cpu PASS_REGULAR_EXPRESSION "ab: --layouts 0: must be from 1")
add_test(NAME cli_ab_bad_windows_says_why COMMAND gpumem_ab --windows 1.5 pair:512)
set_tests_properties(cli_ab_bad_windows_says_why PROPERTIES LABELS cpu PASS_REGULAR_EXPRESSION "ab: '1.5' is not a count \\(not whole\\)")
add_test(NAME cli_ab_bad_size_says_why COMMAND gpumem_ab --windows 3 pair:abc)
set_tests_properties(cli_ab_bad_size_says_why PROPERTIES LABELS cpu PASS_REGULAR_EXPRESSION "ab: 'abc' is not a byte size")
