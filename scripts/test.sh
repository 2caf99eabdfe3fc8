#!/usr/bin/env bash
# Runs collx's tests: installs missing build dependencies (scripts/deps.sh), configures a Release
# build with the tests, builds it with 2 jobs and runs ctest.
# Usage: scripts/test.sh [extra cmake -D options...]
# Environment: BUILD_DIR (default build), CXX (compiler), BUILD_TYPE (default Release).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

scripts/deps.sh
build=${BUILD_DIR:-build}
args=(-DCMAKE_BUILD_TYPE="${BUILD_TYPE:-Release}" -DCOLLX_BUILD_TESTS=ON)
[[ -n "${CXX:-}" ]] && args+=("-DCMAKE_CXX_COMPILER=$CXX")
cmake -S . -B "$build" "${args[@]}" "$@"
cmake --build "$build" -j2
ctest --test-dir "$build" --output-on-failure
