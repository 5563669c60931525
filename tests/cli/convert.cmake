# integrations/torch_snapshot_to_csv.py: its unit tests on synthetic snapshots, and its output fed
# to `gpumem replay --json` (peak_live_bytes must be what the snapshot implies). Standard-library
# Python only; skipped (exit 77) where python3 is missing.
set(_convert_py_dir ${PROJECT_SOURCE_DIR}/tests/python)

add_test(NAME python_snapshot_to_csv
  COMMAND sh -c "${GPUMEM_PYTHON3} -m unittest -v test_snapshot_to_csv.SnapshotToCsvTest"
  WORKING_DIRECTORY ${_convert_py_dir})
set_tests_properties(python_snapshot_to_csv PROPERTIES LABELS cpu SKIP_RETURN_CODE 77)

add_test(NAME cli_snapshot_to_csv_replay_peak
  COMMAND sh -c "${GPUMEM_PYTHON3} -m unittest -v test_snapshot_to_csv.ReplayPeakTest"
  WORKING_DIRECTORY ${_convert_py_dir})
set_tests_properties(cli_snapshot_to_csv_replay_peak PROPERTIES LABELS cpu SKIP_RETURN_CODE 77
  ENVIRONMENT "GPUMEM_CLI=$<TARGET_FILE:gpumem_cli>"
  # A skip inside unittest (GPUMEM_CLI unset) must not pass silently.
  FAIL_REGULAR_EXPRESSION "skipped '")
