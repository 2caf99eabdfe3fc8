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
# ctest's summary ("100% tests passed, 0 tests failed out of N") comes before its timing and the
# failed tests' output: repeated last, so that the run's last line says how it went.
log="$build/Testing/test-sh.log"
mkdir -p "$build/Testing"
status=0
ctest --test-dir "$build" --output-on-failure 2>&1 | tee "$log" || status=$?
summary=$(grep -E '^[0-9]+% tests passed' "$log" | tail -n 1 || true)
echo "scripts/test.sh ($build): ${summary:-ctest printed no summary (exit status $status)}"
exit "$status"
