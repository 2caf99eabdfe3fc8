# Helpers for collx's optional components (collx::cuda, collx::mpi, collx::nccl): the AUTO | ON |
# OFF option each has, and the INTERFACE target each makes with its own export set, which
# collxConfig.cmake loads only when a consumer asks for the component.

# Reads the cache variable `var` (AUTO, ON or OFF, or another of CMake's boolean spellings) into
# `${var}_MODE` as AUTO, ON or OFF; anything else stops the configure with a message.
function(collx_component_mode var)
  string(TOUPPER "${${var}}" mode)
  if(mode MATCHES "^(ON|TRUE|YES|1)$")
    set(mode ON)
  elseif(mode MATCHES "^(OFF|FALSE|NO|0)$")
    set(mode OFF)
  elseif(NOT mode STREQUAL "AUTO")
    message(FATAL_ERROR "${var}='${${var}}': use AUTO, ON or OFF")
  endif()
  set(${var}_MODE ${mode} PARENT_SCOPE)
endfunction()

# Makes INTERFACE target collx_<name> (alias and export name collx::<name>) linking the rest of the
# arguments, and, with COLLX_INSTALL, installs it in export set `export_set` (file
# <export_set>.cmake next to collxConfig.cmake).
function(collx_component_target name export_set)
  add_library(collx_${name} INTERFACE)
  add_library(collx::${name} ALIAS collx_${name})
  set_target_properties(collx_${name} PROPERTIES EXPORT_NAME ${name})
  target_link_libraries(collx_${name} INTERFACE ${ARGN})
  if(COLLX_INSTALL)
    install(TARGETS collx_${name} EXPORT ${export_set})
    install(EXPORT ${export_set} NAMESPACE collx:: FILE ${export_set}.cmake DESTINATION "${COLLX_INSTALL_CMAKEDIR}")
  endif()
endfunction()
