# cmake -DGPUMEM_CLI=... -DDOC=docs/options.md -P check_options_doc.cmake: fails when DOC is not
# what `gpumem options --markdown` prints.
execute_process(COMMAND ${GPUMEM_CLI} options --markdown OUTPUT_VARIABLE generated RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "gpumem options --markdown failed (exit ${rc})")
endif()
file(READ ${DOC} written)
if(NOT written STREQUAL generated)
  message(FATAL_ERROR "${DOC} differs from the pool option table: regenerate it with\n"
                      "  gpumem options --markdown > docs/options.md")
endif()
message(STATUS "${DOC} matches the pool option table")
