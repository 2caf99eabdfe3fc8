#!/usr/bin/env bash
# bench/gpu-deps.sh: copies what collx's GPU tests need but a bare GPU machine may lack into
# .gpu-deps/ (ignored by git), so that it can travel with the working tree to such a machine.
# Today that is Catch2 (Debian's catch2 2.x: one header, its CMake package files, which
# locate the header relative to themselves). bench/gpu-check.sh uses .gpu-deps/usr as a CMake
# prefix when it exists. Run on a machine that has the package (`apt-get install catch2`).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
[[ -f /usr/include/catch2/catch.hpp && -d /usr/lib/cmake/Catch2 ]] ||
  { echo "gpu-deps: Catch2 not installed here (apt-get install catch2)" >&2; exit 1; }
rm -rf .gpu-deps
mkdir -p .gpu-deps/usr/include .gpu-deps/usr/lib/cmake
cp -r /usr/include/catch2 .gpu-deps/usr/include/
cp -r /usr/lib/cmake/Catch2 .gpu-deps/usr/lib/cmake/
cp /usr/lib/libCatch2WithMain.a .gpu-deps/usr/lib/  # the package config checks that it exists
du -sh .gpu-deps
