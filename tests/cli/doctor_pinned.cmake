# `gpumem doctor TRACE --pinned PINNED [--pinned-cap BYTES]`: the pinned-memory finding from the
# command line, on the bundled example (a loader that pins per batch next to a 1.5 GiB buffer kept
# pinned) and on a steady two-buffer trace; and bad pinned input refused with exit 2.
set(_pinned_examples ${PROJECT_SOURCE_DIR}/examples)
set(_pinned_data ${CMAKE_CURRENT_LIST_DIR}/data)

function(gpumem_doctor_pinned_test name regex)
  add_test(NAME ${name} COMMAND $<TARGET_FILE:gpumem_cli> doctor --json --no-replay ${ARGN})
  set_tests_properties(${name} PROPERTIES LABELS cpu PASS_REGULAR_EXPRESSION "${regex}")
endfunction()

# Cap below the example's 1.55 GiB peak: the resource would have refused.
gpumem_doctor_pinned_test(cli_doctor_pinned_over_cap
  "\"pinned_trace\":\"[^\"]*pinned_host.csv\".*\"id\":\"pinned-memory\",\"severity\":\"error\".*\"peak_pinned_bytes\":1660944512,\"pinned_cap_bytes\":1073741824,"
  ${_pinned_examples}/small_training.csv --pinned ${_pinned_examples}/pinned_host.csv --pinned-cap 1GiB)
# A roomy cap: still a warning, for the per-batch re-pins (118 of 121 allocations).
gpumem_doctor_pinned_test(cli_doctor_pinned_churn
  "\"id\":\"pinned-memory\",\"severity\":\"warning\".*\"pinned_allocations\":121,.*\"repinned_allocations\":118,"
  ${_pinned_examples}/small_training.csv --pinned ${_pinned_examples}/pinned_host.csv --pinned-cap 64G)
# Two 32 MiB buffers kept for 30 s: 64 MiB of an 8 GiB cap, nothing re-pinned.
gpumem_doctor_pinned_test(cli_doctor_pinned_steady_info
  "\"worst_severity\":\"info\".*\"id\":\"pinned-memory\",\"severity\":\"info\".*\"peak_pinned_bytes\":67108864,\"pinned_cap_bytes\":8589934592,\"peak_share_of_cap\":0.0078125,"
  ${_pinned_examples}/small_training.csv --pinned ${_pinned_data}/pinned_steady.csv --pinned-cap 8GiB)
# Without --pinned the finding is absent and skipped says why.
gpumem_doctor_pinned_test(cli_doctor_pinned_skipped
  "\"pinned_trace\":null,.*\"skipped\":\\[.*\"pinned-memory: no pinned trace given \\(--pinned\\)\"\\]"
  ${_pinned_examples}/small_training.csv)

# Findings are not a failure: exit 0 (PASS_REGULAR_EXPRESSION above ignores the exit code).
add_test(NAME cli_doctor_pinned_exit_ok
  COMMAND $<TARGET_FILE:gpumem_cli> doctor --no-replay ${_pinned_examples}/small_training.csv
          --pinned ${_pinned_examples}/pinned_host.csv --pinned-cap 1GiB)
set_tests_properties(cli_doctor_pinned_exit_ok PROPERTIES LABELS cpu)

# Bad input exits 2 (the command is run through sh to check the code itself) with a message
# saying what, where and why.
function(gpumem_doctor_pinned_refused name regex)
  add_test(NAME ${name}
    COMMAND sh -c "\"$0\" doctor \"$@\" 2>&1; rc=$?; echo \"exit $rc\"" $<TARGET_FILE:gpumem_cli> ${ARGN})
  set_tests_properties(${name} PROPERTIES LABELS cpu PASS_REGULAR_EXPRESSION "${regex}")
endfunction()
gpumem_doctor_pinned_refused(cli_doctor_pinned_bad_trace
  "gpumem doctor: error: [^\n]*bad_action.csv:3: unknown action `release`.*exit 2"
  ${_pinned_examples}/small_training.csv --pinned ${_pinned_data}/bad_action.csv)
gpumem_doctor_pinned_refused(cli_doctor_pinned_missing_trace
  "gpumem doctor: error: [^\n]*no_such_pinned.csv: .*exit 2"
  ${_pinned_examples}/small_training.csv --pinned ${_pinned_data}/no_such_pinned.csv)
gpumem_doctor_pinned_refused(cli_doctor_pinned_bad_cap
  "gpumem doctor: error: --pinned-cap: 'lots' is not a byte size.*exit 2"
  ${_pinned_examples}/small_training.csv --pinned ${_pinned_examples}/pinned_host.csv --pinned-cap lots)
gpumem_doctor_pinned_refused(cli_doctor_pinned_zero_cap
  "--pinned-cap: the cap must be above 0 bytes.*exit 2"
  ${_pinned_examples}/small_training.csv --pinned ${_pinned_examples}/pinned_host.csv --pinned-cap 0)
gpumem_doctor_pinned_refused(cli_doctor_pinned_two_device_traces
  "--pinned pairs one pinned trace with one device trace, but 2 device traces were given.*exit 2"
  ${_pinned_examples}/small_training.csv ${_pinned_examples}/pitfalls.csv
  --pinned ${_pinned_examples}/pinned_host.csv)
