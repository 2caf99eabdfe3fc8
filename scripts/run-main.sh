#!/usr/bin/env bash
# The main job: builds everything (library checks, tests, examples) in build/, runs an all-reduce
# benchmark, then the data-parallel training of examples/train_digits (an MLP on the UCI handwritten
# digits) over local processes, which checks its held-out accuracy (> 90%) and that its weights are
# bit-identical to the 1-process reference.
# Usage: scripts/run-main.sh [ranks (default 4)]     Environment: BUILD_DIR (default build), CXX, BUILD_TYPE.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

scripts/deps.sh
build=${BUILD_DIR:-build}
ranks=${1:-4}
args=(-DCMAKE_BUILD_TYPE="${BUILD_TYPE:-Release}" -DCOLLX_BUILD_EXAMPLES=ON)
[[ -n "${CXX:-}" ]] && args+=("-DCMAKE_CXX_COMPILER=$CXX")
cmake -S . -B "$build" "${args[@]}" >/dev/null
cmake --build "$build" -j2

# ---- 1. all-reduce benchmark ------------------------------------------------------------------
# nccl-tests' table for collx's all-reduce over 2 processes on shared memory (checked: -c 1).
"$build/bench/collx-perf" allreduce -b 8 -e 16M -f 4 -n 20 -w 5 -c 1 --ranks 2

# ---- 2. data-parallel training on the digits over $ranks local processes ---------------------
echo
"$build/examples/train_digits" --ranks "$ranks"
