# Writes OUTPUT, a header defining COLLX_PERF_GIT_REVISION as `git describe --always --dirty` of
# SOURCE_DIR (nothing when it is not a git checkout or git is missing), and rewrites it only when
# the revision changed, so that collx-perf recompiles one file only after a commit or an edit.
# Run at every build (bench/CMakeLists.txt), not at configure time: a build of a later commit, or
# of a tree with edits, must not name the revision the build directory was configured at.
# Usage: cmake -DGIT=<git> -DSOURCE_DIR=<dir> -DOUTPUT=<header> -P collx_git_revision.cmake
set(_rev "")
if(GIT AND EXISTS "${SOURCE_DIR}/.git")
  execute_process(COMMAND "${GIT}" describe --always --dirty --abbrev=10 WORKING_DIRECTORY "${SOURCE_DIR}"
                  OUTPUT_VARIABLE _rev OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
endif()
set(_text "// Generated at build time by cmake/collx_git_revision.cmake: the collx revision collx-perf measures.\n")
if(_rev)
  string(APPEND _text "#define COLLX_PERF_GIT_REVISION \"${_rev}\"\n")
endif()
set(_old "")
if(EXISTS "${OUTPUT}")
  file(READ "${OUTPUT}" _old)
endif()
if(NOT _old STREQUAL _text)
  file(WRITE "${OUTPUT}" "${_text}")
endif()
