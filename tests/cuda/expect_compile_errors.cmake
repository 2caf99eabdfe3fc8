# Compiles SOURCE with COMPILER and FLAGS (space-separated) and passes only if the compile fails and its
# output matches every `// expect: REGEX` line of SOURCE: each misuse in the file must fail for
# its own reason, not the file for the first one's. Used by ctest for tests/cuda/compile_fail/.
#   cmake -DCOMPILER=nvcc "-DFLAGS=-std=c++20 -arch=sm_90" -DSOURCE=x.cu -DOBJECT=x.o -P expect_compile_errors.cmake
file(STRINGS "${SOURCE}" _expect_lines REGEX "^// expect: ")
if(NOT _expect_lines)
  message(FATAL_ERROR "${SOURCE} has no `// expect:` line")
endif()
separate_arguments(_flags UNIX_COMMAND "${FLAGS}")
execute_process(COMMAND "${COMPILER}" ${_flags} -c "${SOURCE}" -o "${OBJECT}" RESULT_VARIABLE _rc
                OUTPUT_VARIABLE _out ERROR_VARIABLE _out)
message("${COMPILER} ... ${SOURCE}: exit status ${_rc}\n${_out}")
if(_rc EQUAL 0)
  message(FATAL_ERROR "${SOURCE} compiled; every function in it must fail")
endif()
set(_missing "")
foreach(_line IN LISTS _expect_lines)
  string(REGEX REPLACE "^// expect: " "" _regex "${_line}")
  if(NOT _out MATCHES "${_regex}")
    string(APPEND _missing "\n  ${_regex}")
  endif()
endforeach()
if(_missing)
  message(FATAL_ERROR "the compiler's output lacks the expected messages:${_missing}")
endif()
