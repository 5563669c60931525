# `gpumem bench --peer-lib`: a peer from a shared library (src/cli/bench_peer.h) is timed in
# the same process as gpumem's pool, gets its rows and its ratio column, and a library that cannot
# take part is refused before anything runs, with the path and the reason.
add_library(gpumem_test_peer MODULE ${CMAKE_CURRENT_LIST_DIR}/peer/test_peer.cpp)
target_include_directories(gpumem_test_peer PRIVATE ${PROJECT_SOURCE_DIR}/src/cli)
gpumem_warnings(gpumem_test_peer)
set(_peer $<TARGET_FILE:gpumem_test_peer>)
set(_peer_cli $<TARGET_FILE:gpumem_cli>)

add_test(NAME cli_bench_peer_lib_rows_beside_gpumem
  COMMAND ${_peer_cli} bench pair --simulate --reps 1 --peer-lib ${_peer} --json)
set_tests_properties(cli_bench_peer_lib_rows_beside_gpumem PROPERTIES LABELS cpu
  PASS_REGULAR_EXPRESSION "\"pattern\":\"pair\",\"allocator\":\"test-peer\",\"device\":\"host\",\"size_bytes\":512,\"ns_per_pair\":[0-9.e+]+[^\n]*\n(.*\n)*\\{\"pattern\":\"pair\",\"allocator\":\"test-peer\",\"device\":\"host\",\"size_bytes\":268435456,\"ns_per_pair\":[0-9.e+]+"
  FAIL_REGULAR_EXPRESSION "never freed")

# In the table: its own column and gpumem's ratio to it, on every pattern (threads included: a
# peer without streams of its own runs each thread on stream 0).
add_test(NAME cli_bench_peer_lib_in_the_table_with_a_ratio
  COMMAND ${_peer_cli} bench threads --simulate --reps 1 --allocator gpumem-sim test-peer --peer-lib ${_peer})
set_tests_properties(cli_bench_peer_lib_in_the_table_with_a_ratio PROPERTIES LABELS cpu
  PASS_REGULAR_EXPRESSION "gpumem-sim +test-peer +vs test-peer[^\n]*\n +1 threads? +[0-9.e+]+ +[0-9.e+]+ +[0-9.]+x"
  FAIL_REGULAR_EXPRESSION "never freed")

# A failing alloc becomes an error row naming the peer and its reason (exit code 1, below).
add_test(NAME cli_bench_peer_lib_failure_says_why
  COMMAND ${CMAKE_COMMAND} -E env GPUMEM_TEST_PEER_FAIL_OVER=1048576
          ${_peer_cli} bench pair --simulate --reps 1 --allocator test-peer --peer-lib ${_peer})
set_tests_properties(cli_bench_peer_lib_failure_says_why PROPERTIES LABELS cpu
  PASS_REGULAR_EXPRESSION "error: pair 16 MiB test-peer: test-peer: alloc of 16777216 B failed: test-peer refuses 16777216 B")

# Refused before anything runs (exit 2), each with the path and what is wrong.
add_test(NAME cli_bench_peer_lib_not_a_library
  COMMAND ${_peer_cli} bench pair --simulate --reps 1 --peer-lib ${PROJECT_SOURCE_DIR}/README.md)
set_tests_properties(cli_bench_peer_lib_not_a_library PROPERTIES LABELS cpu
  PASS_REGULAR_EXPRESSION "--peer-lib [^\n]*README.md: cannot be loaded: ")
add_test(NAME cli_bench_peer_lib_without_the_entry_point
  COMMAND ${_peer_cli} bench pair --simulate --reps 1 --peer-lib ${ZLIB_LIBRARIES})
set_tests_properties(cli_bench_peer_lib_without_the_entry_point PROPERTIES LABELS cpu
  PASS_REGULAR_EXPRESSION "--peer-lib [^\n]*: exports no gpumem_bench_peer_entry function")
add_test(NAME cli_bench_peer_lib_speaks_no_version_we_speak
  COMMAND ${CMAKE_COMMAND} -E env GPUMEM_TEST_PEER_REFUSE=1
          ${_peer_cli} bench pair --simulate --reps 1 --peer-lib ${_peer})
set_tests_properties(cli_bench_peer_lib_speaks_no_version_we_speak PROPERTIES LABELS cpu
  PASS_REGULAR_EXPRESSION "does not speak the peer interface version 1 this gpumem speaks")
add_test(NAME cli_bench_peer_lib_answers_for_another_version
  COMMAND ${CMAKE_COMMAND} -E env GPUMEM_TEST_PEER_ABI=7
          ${_peer_cli} bench pair --simulate --reps 1 --peer-lib ${_peer})
set_tests_properties(cli_bench_peer_lib_answers_for_another_version PROPERTIES LABELS cpu
  PASS_REGULAR_EXPRESSION "answered for interface version 7, asked for 1")
add_test(NAME cli_bench_peer_lib_unknown_device
  COMMAND ${CMAKE_COMMAND} -E env GPUMEM_TEST_PEER_DEVICE=tpu
          ${_peer_cli} bench pair --simulate --reps 1 --peer-lib ${_peer})
set_tests_properties(cli_bench_peer_lib_unknown_device PROPERTIES LABELS cpu
  PASS_REGULAR_EXPRESSION "its peer test-peer names device \"tpu\", not gpu, host or simulated")
# A GPU peer in a run on the simulated device: refused, not silently left out.
add_test(NAME cli_bench_peer_lib_gpu_peer_in_a_simulated_run
  COMMAND ${CMAKE_COMMAND} -E env GPUMEM_TEST_PEER_DEVICE=gpu
          ${_peer_cli} bench pair --simulate --reps 1 --peer-lib ${_peer})
set_tests_properties(cli_bench_peer_lib_gpu_peer_in_a_simulated_run PROPERTIES LABELS cpu
  PASS_REGULAR_EXPRESSION "its peer test-peer works on the GPU, and this run is on the simulated device")
# PASS_REGULAR_EXPRESSION ignores the exit code: 2 for a library refused, 1 for a peer's failure.
add_test(NAME cli_bench_peer_lib_refused_exits_2
  COMMAND sh -c "\"$0\" bench pair --simulate --reps 1 --peer-lib \"$1\" 2>/dev/null; test $? -eq 2"
          ${_peer_cli} ${PROJECT_SOURCE_DIR}/README.md)
set_tests_properties(cli_bench_peer_lib_refused_exits_2 PROPERTIES LABELS cpu)
add_test(NAME cli_bench_peer_lib_failure_exits_1
  COMMAND sh -c "GPUMEM_TEST_PEER_FAIL_OVER=1048576 \"$0\" bench pair --simulate --reps 1 --allocator test-peer --peer-lib \"$1\" >/dev/null 2>&1; test $? -eq 1"
          ${_peer_cli} ${_peer})
set_tests_properties(cli_bench_peer_lib_failure_exits_1 PROPERTIES LABELS cpu)

# The interface is C: a peer may be written in C, or built with another compiler's C++.
add_test(NAME cli_bench_peer_header_is_plain_c
  COMMAND sh -c "command -v cc >/dev/null 2>&1 || { echo 'cc not found: skipped'; exit 77; }; printf '#include <bench_peer.h>\\nint main(void) { gpumem_bench_peer p = {0}; return p.abi; }\\n' | exec cc -std=c99 -pedantic -Wall -Wextra -Werror -I\"$0\" -x c -o /dev/null -"
          ${PROJECT_SOURCE_DIR}/src/cli)
set_tests_properties(cli_bench_peer_header_is_plain_c PROPERTIES LABELS cpu SKIP_RETURN_CODE 77)

# Without --peer-lib: every libgpumem_*_peer.so beside the executable (here: $GPUMEM_BENCH_PEER_DIR)
# joins the run; --no-auto-peers leaves them out; one that cannot join is left out with a note,
# and the run goes on.
add_test(NAME cli_bench_peer_lib_found_beside
  COMMAND ${CMAKE_COMMAND} -E env GPUMEM_BENCH_PEER_DIR=$<TARGET_FILE_DIR:gpumem_test_peer>
          ${_peer_cli} bench pair --simulate --reps 1 --json)
set_tests_properties(cli_bench_peer_lib_found_beside PROPERTIES LABELS cpu
  PASS_REGULAR_EXPRESSION "\"allocator\":\"test-peer\",\"device\":\"host\",\"size_bytes\":512")
add_test(NAME cli_bench_peer_lib_found_beside_and_named_runs_once
  COMMAND sh -c "GPUMEM_BENCH_PEER_DIR=\"$(dirname \"$1\")\" \"$0\" bench pair --simulate --reps 1 --json --peer-lib \"$1\" | grep -c '\"allocator\":\"test-peer\",\"device\":\"host\",\"size_bytes\":512,'"
          ${_peer_cli} ${_peer})
set_tests_properties(cli_bench_peer_lib_found_beside_and_named_runs_once PROPERTIES LABELS cpu
  PASS_REGULAR_EXPRESSION "^1\n$")
add_test(NAME cli_bench_peer_lib_no_auto_peers
  COMMAND ${CMAKE_COMMAND} -E env GPUMEM_BENCH_PEER_DIR=$<TARGET_FILE_DIR:gpumem_test_peer>
          ${_peer_cli} bench pair --simulate --reps 1 --json --no-auto-peers)
set_tests_properties(cli_bench_peer_lib_no_auto_peers PROPERTIES LABELS cpu
  PASS_REGULAR_EXPRESSION "\"allocator\":\"malloc\"" FAIL_REGULAR_EXPRESSION "test-peer")
add_test(NAME cli_bench_peer_lib_found_beside_for_the_gpu_is_left_out
  COMMAND sh -c "GPUMEM_TEST_PEER_DEVICE=gpu GPUMEM_BENCH_PEER_DIR=\"$(dirname \"$1\")\" \"$0\" bench pair --simulate --reps 1 --json --allocator gpumem-sim 2>&1; echo exit=$?"
          ${_peer_cli} ${_peer})
set_tests_properties(cli_bench_peer_lib_found_beside_for_the_gpu_is_left_out PROPERTIES LABELS cpu
  PASS_REGULAR_EXPRESSION "libgpumem_test_peer.so \\(found beside gpumem\\): its peer test-peer works on the GPU, and this run is on the simulated device; left out\n(.*\n)*exit=0")
add_test(NAME cli_bench_peer_lib_found_beside_and_broken_is_left_out
  COMMAND sh -c "d=$(mktemp -d) && cp \"$1\" \"$d/libgpumem_broken_peer.so\" && GPUMEM_BENCH_PEER_DIR=\"$d\" \"$0\" bench pair --simulate --reps 1 --json --allocator gpumem-sim 2>&1; echo exit=$?; rm -rf \"$d\""
          ${_peer_cli} ${PROJECT_SOURCE_DIR}/README.md)
set_tests_properties(cli_bench_peer_lib_found_beside_and_broken_is_left_out PROPERTIES LABELS cpu
  PASS_REGULAR_EXPRESSION "libgpumem_broken_peer.so \\(found beside gpumem\\): cannot be loaded: [^\n]*; left out \\(--no-auto-peers skips the search\\)\n(.*\n)*exit=0")
