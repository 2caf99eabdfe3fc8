# Runs PROGRAM with ARGS (space-separated) and fails unless it exits with status 2 (a bad command
# line) and prints a message matching the regular expression EXPECT to stderr. Used by ctest for
# the examples' option checks (common.hpp's collx_examples::options), which must refuse a bad value
# before starting any rank rather than run a default, fork thousands of processes or crash later.
#   cmake -DPROGRAM=... "-DARGS=--ranks 0" "-DEXPECT=--ranks must be" -P expect_usage_error.cmake
separate_arguments(_args UNIX_COMMAND "${ARGS}")
execute_process(COMMAND "${PROGRAM}" ${_args} RESULT_VARIABLE _rc OUTPUT_VARIABLE _stdout ERROR_VARIABLE _stderr
                TIMEOUT 60)
message("${PROGRAM} ${ARGS}: exit status ${_rc}\n${_stdout}${_stderr}")
if(NOT _rc STREQUAL "2")
  message(FATAL_ERROR "expected exit status 2 (bad command line), got ${_rc}")
endif()
if(NOT _stderr MATCHES "${EXPECT}")
  message(FATAL_ERROR "stderr does not match '${EXPECT}'")
endif()
