// Shared by the topology tests: reads a fixture from tests/data/topologies (see SOURCES.md there).
#pragma once

#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>

#ifndef COLLX_TOPO_DATA
#error "COLLX_TOPO_DATA must name tests/data/topologies (set by tests/CMakeLists.txt)"
#endif

inline std::string topo_fixture(const std::string& name) {
  std::ifstream f(std::string(COLLX_TOPO_DATA) + "/" + name, std::ios::binary);
  if (!f) throw std::runtime_error("missing fixture " + name);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}
