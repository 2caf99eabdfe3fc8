# collx-topo's device section prints the command that measures its rings
# ("to measure them: collx-perf-cuda --ranks N --algo ring --rings ..."). Runs collx-topo on
# TOPOLOGY, then that command with one small size, and fails unless collx-perf-cuda accepts the
# rings (exit status 0 on a GPU machine, 77 "SKIPPED: no CUDA device" without one; 2 is a usage
# error, which a format that drifted from --rings' parser gives).
#   cmake -DTOPO=<collx-topo> -DPERF=<collx-perf-cuda> -DTOPOLOGY=<file> -P topo_rings_roundtrip.cmake
execute_process(COMMAND "${TOPO}" "${TOPOLOGY}" RESULT_VARIABLE _rc OUTPUT_VARIABLE _out ERROR_VARIABLE _err)
if(NOT _rc EQUAL 0)
  message(FATAL_ERROR "collx-topo ${TOPOLOGY} failed (exit status ${_rc}):\n${_out}${_err}")
endif()
if(NOT _out MATCHES "to measure them: collx-perf-cuda ([^\n]*)")
  message(FATAL_ERROR "collx-topo printed no collx-perf-cuda command:\n${_out}")
endif()
set(_command "${CMAKE_MATCH_1}")
separate_arguments(_args UNIX_COMMAND "${_command}")
execute_process(COMMAND "${PERF}" ${_args} -b 8 -e 8 -n 1 -w 0 --rounds 1 --no-custom
                RESULT_VARIABLE _rc OUTPUT_VARIABLE _out ERROR_VARIABLE _err)
message("collx-perf-cuda ${_command}: exit status ${_rc}\n${_out}${_err}")
if(NOT (_rc EQUAL 0 OR _rc EQUAL 77))
  message(FATAL_ERROR "collx-perf-cuda refused the rings collx-topo printed")
endif()
