#!/usr/bin/env bash
# bench/gpu-check.sh: what collx can check only on a machine with NVIDIA GPUs, in one go.
#   1. the machine: nvidia-smi, nvidia-smi topo -m, nvcc and NCCL versions;
#   2. builds collx's CUDA targets (COLLX_CUDA=ON, COLLX_NCCL=ON; sm_80/sm_90 + PTX) in build-gpu;
#   3. runs the GPU tests: tests/cuda/test_cuda_kernels (every reduction kernel against the host
#      reference, one GPU) and tests/cuda/test_nccl (collx::nccl, one rank per GPU: needs 2 GPUs,
#      prints SKIPPED otherwise);
#   4. writes everything to bench/results/gpu-check-<host>-<UTC time>.log.
# Not yet here (issue 7): collx-perf on device memory and NCCL's peer numbers.
# Budget: under 8 minutes on one H200 (build about 2-3 min with 16 cores, tests well under 1 min).
# Usage: bench/gpu-check.sh [build dir, default build-gpu]
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
build=${1:-build-gpu}
mkdir -p bench/results
log="bench/results/gpu-check-$(hostname -s)-$(date -u +%Y%m%dT%H%M%SZ).log"
export PATH="$PATH:/usr/local/cuda/bin"
status=0
step() { printf '\n==== %s ====\n' "$*"; }

{
  step "machine"
  date -u
  git log -1 --oneline 2>/dev/null || true
  nvidia-smi || { echo "gpu-check: nvidia-smi failed: no usable GPU here"; status=1; }
  nvidia-smi topo -m || true
  nvcc --version | tail -n 2
  grep -h '#define NCCL_\(MAJOR\|MINOR\|PATCH\)' /usr/local/cuda/include/nccl.h 2>/dev/null || true

  step "build ($build)"
  start=$SECONDS
  timeout 420 cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DCOLLX_BUILD_TESTS=ON -DCOLLX_CUDA=ON -DCOLLX_NCCL=ON \
    -DCOLLX_BUILD_EXAMPLES=OFF -DCOLLX_BUILD_BENCH=OFF -DCOLLX_BUILD_TOOLS=OFF -DCOLLX_CHECK_HEADERS=OFF &&
    timeout 420 cmake --build "$build" -j "$(nproc)" --target collx_cuda_tests || { echo "gpu-check: build failed"; status=1; }
  echo "build took $((SECONDS - start)) s"

  step "GPU tests"
  if [[ $status -eq 0 ]]; then
    start=$SECONDS
    timeout 240 ctest --test-dir "$build" -R 'cuda|^test_nccl$' --no-tests=error --output-on-failure -V || status=1
    echo "tests took $((SECONDS - start)) s"
  fi

  step "result"
  echo "gpu-check: $([[ $status -eq 0 ]] && echo passed || echo FAILED)"
  exit "$status"
} 2>&1 | tee "$log"
echo "log: $log"
exit "${PIPESTATUS[0]}"
