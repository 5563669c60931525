# Stream-ordered moves on `gpumem replay` with a device that runs behind (--device-lag): the
# granules a stream's requests took from its own pending frees are in the JSON and the table
# (turning them off is the pool policy's, not an option: pool_stream_ordered_moves_test.cpp).
set(_som_trace ${PROJECT_SOURCE_DIR}/examples/varlen_inference.csv)

add_test(NAME cli_replay_stream_ordered_moves_json
  COMMAND $<TARGET_FILE:gpumem_cli> replay ${_som_trace} --device-lag 50 --json)
set_tests_properties(cli_replay_stream_ordered_moves_json PROPERTIES LABELS cpu
  PASS_REGULAR_EXPRESSION "\"stream_ordered_moves\":[1-9][0-9]*")

add_test(NAME cli_replay_stream_ordered_moves_table
  COMMAND $<TARGET_FILE:gpumem_cli> replay ${_som_trace} --device-lag 50)
set_tests_properties(cli_replay_stream_ordered_moves_table PROPERTIES LABELS cpu
  PASS_REGULAR_EXPRESSION "stream-ordered moves: [1-9][0-9]* granules mapped under their own stream's queued frees")
