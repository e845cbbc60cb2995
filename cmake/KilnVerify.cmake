# KilnVerify: "compile this model and verify it" as one CTest test, in two lines of a user's CI:
#
#   include(KilnVerify)      # with this directory on CMAKE_MODULE_PATH
#   kiln_verify_test(NAME llama MODEL models/llama GOLDEN goldens/llama.json)
#
# The test runs `kiln compile MODEL -o <build dir>/<NAME>.kiln [COMPILE_ARGS]` and then
# `kiln verify <artifact> --golden GOLDEN [VERIFY_ARGS]`; it passes only when verify exits 0 and
# prints verify's diff otherwise. A MODEL directory that does not exist when the test runs makes
# it skip (for models fetched on some machines only).
#
#   kiln_verify_test(NAME name MODEL dir GOLDEN file
#                    [KILN path]              # default: the kiln target of this build, else
#                                             # `kiln` on PATH
#                    [COMPILE_ARGS args...] [VERIFY_ARGS args...]
#                    [LABELS labels...] [TIMEOUT seconds])
#
# Goldens come from `kiln verify ARTIFACT --write GOLDEN.json` on a known-good build, or from
# transformers: tools/goldens/make_verify_golden.py MODEL_DIR for your own model, or the
# repository's tests/data/golden/*.json (docs/verify.md). The failure message says whether verify
# found a regression (exit 1) or could not run (exit 2: a missing golden, an unloadable artifact).
#
# The same file is the test's runner: CTest calls it with `cmake -P` (script mode, below).

if(CMAKE_SCRIPT_MODE_FILE)
  # Runner: -DKILN=... -DMODEL=... -DGOLDEN=... -DOUT=... -DCOMPILE_ARGS=a|b -DVERIFY_ARGS=a|b
  string(REPLACE "|" ";" COMPILE_ARGS "${COMPILE_ARGS}")
  string(REPLACE "|" ";" VERIFY_ARGS "${VERIFY_ARGS}")
  if(NOT EXISTS "${MODEL}")
    message("skip: model directory ${MODEL} is absent")
    return()
  endif()
  file(REMOVE_RECURSE "${OUT}")
  execute_process(COMMAND "${KILN}" compile "${MODEL}" -o "${OUT}" --quiet ${COMPILE_ARGS}
                  RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "kiln compile ${MODEL} failed (exit ${rc})")
  endif()
  execute_process(COMMAND "${KILN}" verify "${OUT}" --golden "${GOLDEN}" ${VERIFY_ARGS}
                  RESULT_VARIABLE rc)
  if(rc EQUAL 1)
    message(FATAL_ERROR "kiln verify ${OUT} --golden ${GOLDEN}: regression (exit 1)")
  elseif(NOT rc EQUAL 0)
    message(FATAL_ERROR "kiln verify ${OUT} --golden ${GOLDEN} could not run (exit ${rc}: an "
                        "error, not a regression)")
  endif()
  return()
endif()

set(KILN_VERIFY_RUNNER "${CMAKE_CURRENT_LIST_FILE}")

function(kiln_verify_test)
  cmake_parse_arguments(V "" "NAME;MODEL;GOLDEN;KILN;TIMEOUT" "COMPILE_ARGS;VERIFY_ARGS;LABELS"
                        ${ARGN})
  foreach(required NAME MODEL GOLDEN)
    if(NOT V_${required})
      message(FATAL_ERROR "kiln_verify_test: ${required} is required")
    endif()
  endforeach()
  if(NOT V_KILN)
    if(TARGET kiln)
      set(V_KILN "$<TARGET_FILE:kiln>")
    else()
      find_program(KILN_EXECUTABLE kiln REQUIRED)
      set(V_KILN "${KILN_EXECUTABLE}")
    endif()
  endif()
  get_filename_component(model "${V_MODEL}" ABSOLUTE)
  get_filename_component(golden "${V_GOLDEN}" ABSOLUTE)
  if(NOT V_TIMEOUT)
    set(V_TIMEOUT 600)
  endif()
  # Lists travel to the runner as one -D argument each, '|'-separated (an escaped ';' reaches the
  # runner as part of one argument).
  string(REPLACE ";" "|" compile_args "${V_COMPILE_ARGS}")
  string(REPLACE ";" "|" verify_args "${V_VERIFY_ARGS}")
  add_test(NAME kiln_verify_${V_NAME}
           COMMAND ${CMAKE_COMMAND} -DKILN=${V_KILN} -DMODEL=${model} -DGOLDEN=${golden}
                   -DOUT=${CMAKE_CURRENT_BINARY_DIR}/kiln_verify_${V_NAME}.kiln
                   "-DCOMPILE_ARGS=${compile_args}" "-DVERIFY_ARGS=${verify_args}"
                   -P ${KILN_VERIFY_RUNNER})
  set_tests_properties(kiln_verify_${V_NAME} PROPERTIES SKIP_REGULAR_EXPRESSION "skip: model directory"
                       TIMEOUT ${V_TIMEOUT})
  if(V_LABELS)
    set_tests_properties(kiln_verify_${V_NAME} PROPERTIES LABELS "${V_LABELS}")
  endif()
endfunction()
