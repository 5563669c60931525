# `gpumem bench` finds the bundled example traces from any folder: a build tree's in the source tree,
# an installed one's in PREFIX/share/gpumem/examples. Run where neither shared/traces nor
# ../shared/traces exists, with $GPUMEM_TRACES unset.
set(_be_dir ${CMAKE_CURRENT_BINARY_DIR}/bench_examples_cwd)
file(MAKE_DIRECTORY ${_be_dir})
add_test(NAME cli_bench_finds_the_examples_from_any_folder
  COMMAND $<TARGET_FILE:gpumem_cli> bench replay --simulate --reps 1 --allocator gpumem-sim)
set_tests_properties(cli_bench_finds_the_examples_from_any_folder PROPERTIES LABELS cpu
  WORKING_DIRECTORY ${_be_dir}
  ENVIRONMENT_MODIFICATION "GPUMEM_TRACES=unset:"
  PASS_REGULAR_EXPRESSION "bundled example traces in [^\n]*/examples\n.*small_training.csv.*varlen_inference.csv"
  FAIL_REGULAR_EXPRESSION "no traces found|pinned_host")

# Installed: the copy under the prefix is found (before the source tree's).
set(_be_prefix ${CMAKE_CURRENT_BINARY_DIR}/bench_examples_install)
add_test(NAME cli_bench_examples_install
  COMMAND ${CMAKE_COMMAND} --install ${CMAKE_BINARY_DIR} --prefix ${_be_prefix})
set_tests_properties(cli_bench_examples_install PROPERTIES LABELS cpu FIXTURES_SETUP gpumem_installed)
add_test(NAME cli_bench_finds_the_installed_examples
  COMMAND ${_be_prefix}/${CMAKE_INSTALL_BINDIR}/gpumem bench replay --simulate --reps 1 --allocator gpumem-sim --json)
set_tests_properties(cli_bench_finds_the_installed_examples PROPERTIES LABELS cpu
  FIXTURES_REQUIRED gpumem_installed
  WORKING_DIRECTORY ${_be_dir}
  ENVIRONMENT_MODIFICATION "GPUMEM_TRACES=unset:"
  PASS_REGULAR_EXPRESSION "\"trace\":\"small_training.csv\"")
add_test(NAME cli_bench_says_which_examples_it_replays
  COMMAND ${_be_prefix}/${CMAKE_INSTALL_BINDIR}/gpumem bench replay --simulate --reps 1 --allocator gpumem-sim)
set_tests_properties(cli_bench_says_which_examples_it_replays PROPERTIES LABELS cpu
  FIXTURES_REQUIRED gpumem_installed
  WORKING_DIRECTORY ${_be_dir}
  ENVIRONMENT_MODIFICATION "GPUMEM_TRACES=unset:"
  PASS_REGULAR_EXPRESSION "bundled example traces in ${_be_prefix}/${CMAKE_INSTALL_DATADIR}/gpumem/examples\n")
