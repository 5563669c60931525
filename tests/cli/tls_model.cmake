# Which TLS model each build of the library gives the pointer every allocate and free reads
# (CMakeLists.txt): initial-exec in gpumem_alloc, the general model in gpumem_dlopen. x86-64 only: the
# relocations the check reads are that architecture's.
if(CMAKE_OBJDUMP AND CMAKE_SYSTEM_PROCESSOR MATCHES "x86_64|AMD64")
  foreach(_case "gpumem_alloc;initial-exec" "gpumem_dlopen;general")
    list(GET _case 0 _lib)
    list(GET _case 1 _model)
    add_test(NAME tls_model_${_lib}
      COMMAND ${CMAKE_COMMAND} -DOBJDUMP=${CMAKE_OBJDUMP} -DLIB=$<TARGET_FILE:${_lib}> -DEXPECT=${_model}
              -P ${PROJECT_SOURCE_DIR}/tests/support/check_tls_model.cmake)
    # `slow`: objdump over a sanitizer build's archives takes long, and the plain build checks the same.
    set_tests_properties(tls_model_${_lib} PROPERTIES LABELS "cpu;slow")
  endforeach()
endif()
