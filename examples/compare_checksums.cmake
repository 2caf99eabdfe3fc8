# Runs PROGRAM twice (arguments RUN_A, then RUN_B; space-separated), each with --out <file>, and fails unless
# both wrote the same `checksum=` line. Used by ctest for train_digits: 4 ranks vs 1 rank folding 4
# shard partials.
#   cmake -DPROGRAM=... "-DRUN_A=--x 1 --y" "-DRUN_B=..." -DWORK_DIR=... -P compare_checksums.cmake
foreach(_run A B)
  set(_out "${WORK_DIR}/compare_checksums_${_run}.txt")
  file(REMOVE "${_out}")
  separate_arguments(_args UNIX_COMMAND "${RUN_${_run}}")
  execute_process(COMMAND "${PROGRAM}" ${_args} --out "${_out}" RESULT_VARIABLE _rc OUTPUT_VARIABLE _stdout
                  ERROR_VARIABLE _stderr)
  message("${PROGRAM} ${RUN_${_run}}:\n${_stdout}${_stderr}")
  if(NOT _rc EQUAL 0)
    message(FATAL_ERROR "run ${_run} failed (exit status ${_rc})")
  endif()
  file(STRINGS "${_out}" _line REGEX "^checksum=")
  if(NOT _line)
    message(FATAL_ERROR "run ${_run} wrote no checksum to ${_out}")
  endif()
  set(_sum_${_run} "${_line}")
endforeach()
if(NOT _sum_A STREQUAL _sum_B)
  message(FATAL_ERROR "checksums differ: ${_sum_A} (${RUN_A}) vs ${_sum_B} (${RUN_B})")
endif()
message("same weights: ${_sum_A} from both runs")
