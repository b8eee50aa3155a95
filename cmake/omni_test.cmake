# omni_add_test(NAME name SOURCES a.c ... LIBS lib ... [LABELS l ...] [ARGS ...] [TIMEOUT s])
# Builds one test executable and registers it with CTest. Exit code 77 means SKIP.
# Tests find committed fixtures through the OMNI_FIXTURES and OMNI_SOURCE_DIR compile definitions.
function(omni_add_test)
  cmake_parse_arguments(T "" "NAME;TIMEOUT" "SOURCES;LIBS;LABELS;ARGS" ${ARGN})
  add_executable(${T_NAME} ${T_SOURCES})
  target_link_libraries(${T_NAME} PRIVATE ${T_LIBS} m)
  target_include_directories(${T_NAME} PRIVATE ${PROJECT_SOURCE_DIR} ${PROJECT_SOURCE_DIR}/tests)
  target_compile_definitions(${T_NAME} PRIVATE
    OMNI_SOURCE_DIR="${PROJECT_SOURCE_DIR}" OMNI_FIXTURES="${PROJECT_SOURCE_DIR}/tests/fixtures"
    OMNI_SHARED_DIR="${PROJECT_SOURCE_DIR}/../shared")
  add_test(NAME ${T_NAME} COMMAND ${T_NAME} ${T_ARGS})
  # Passive OpenMP waiting: ctest runs tests side by side on few cores, where spinning threads starve each other
  # (measured: the decoder fixture test 41 s with spinning vs 2 s passive on a loaded 2-core machine).
  set_tests_properties(${T_NAME} PROPERTIES SKIP_RETURN_CODE 77 ENVIRONMENT "OMP_WAIT_POLICY=passive")
  if(T_LABELS)
    set_tests_properties(${T_NAME} PROPERTIES LABELS "${T_LABELS}")
  endif()
  if(T_TIMEOUT)
    set_tests_properties(${T_NAME} PROPERTIES TIMEOUT ${T_TIMEOUT})
  endif()
endfunction()
