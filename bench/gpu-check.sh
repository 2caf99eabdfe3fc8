#!/usr/bin/env bash
# bench/gpu-check.sh: what collx can check only on a machine with NVIDIA GPUs, in one go.
#   1. the machine: nvidia-smi, nvidia-smi topo -m, nvcc, CMake, compiler and NCCL versions;
#   2. dependencies: Catch2 from the system or from .gpu-deps/ (bench/gpu-deps.sh copies it there
#      to travel with the tree); NCCL from the CUDA toolkit, NCCL_ROOT, or Python's nvidia-nccl wheel;
#   3. builds collx's CUDA targets (COLLX_CUDA=ON, COLLX_NCCL when found; sm_90 + PTX), collx-run,
#      collx-topo, collx-perf-cuda and the GPU example gpu_moments in build-gpu;
#   4. live topology discovery: collx-topo on this machine (CUDA runtime + NVML), text and JSON;
#   5. runs the GPU tests: test_cuda_kernels (every reduction kernel against the host reference),
#      test_cuda_device (the device collectives, ranks as threads), test_cuda_device_procs (ranks as
#      3 processes over CUDA IPC, sharing the GPUs there are) and test_nccl (collx::nccl, one rank
#      per GPU: needs 2 GPUs, prints SKIPPED otherwise) and examples/gpu_moments (2 and 3 ranks);
#   6. collx-perf-cuda: the copy ceiling, then all-reduce, reduce-scatter and all-gather on device
#      memory from 8 B to 1 GiB with 2 ranks (NCCL beside them when each rank has its own GPU), then
#      custom ops against built-in sums; all-reduce one-shot against two-shot with 4 ranks (one per
#      GPU where there are 4, else sharing them); the ring (--algo ring) with 4 ranks, one channel and
#      two (--rings); 2 ranks with
#      their workspaces in shared host memory (--memory host; also with --algo ring); with one
#      rank per GPU when there are 4 or more GPUs;
#   7. writes everything to bench/results/gpu-check-<host>-<UTC time>.log ($OUT/ instead when set).
# Budget: under 8 minutes on one H200 (2026-12-04: build 200-240 s with 16 cores, tests about 70 s,
# benchmark under 1 min; 280-390 s in all); GPU_CHECK_BUDGET seconds (default 420) caps the whole
# run, each step cut to what is left.
# Usage: bench/gpu-check.sh [build dir, default build-gpu]
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
build=${1:-build-gpu}
mkdir -p bench/results
# Under the device tool, $OUT is what comes back, even when the command is cut short: log there.
log="${OUT:-bench/results}/gpu-check-$(hostname -s)-$(date -u +%Y%m%dT%H%M%SZ).log"
export PATH="$PATH:/usr/local/cuda/bin"
status=0
step() { printf '\n==== %s ====\n' "$*"; }
# One deadline for the whole check (GPU_CHECK_BUDGET seconds, default 420): every step's timeout
# is cut to what is left, so a hang in one step cannot push the result line past the device
# tool's limit; a step with under 10 s left is skipped, and says so.
budget=${GPU_CHECK_BUDGET:-420}
[[ $budget =~ ^[0-9]+$ ]] || { echo "gpu-check: GPU_CHECK_BUDGET must be whole seconds, not '$budget'" >&2; exit 2; }
deadline=$((SECONDS + 10#$budget))
cap() {  # cap N: N, or the seconds left before the deadline (less a 5 s margin) when fewer
  local left=$((deadline - SECONDS - 5))
  if ((left < 10)); then echo 0; elif ((left < $1)); then echo "$left"; else echo "$1"; fi
}
within() {  # within N command...: command under timeout $(cap N); fails (and says so) when no time is left
  local t
  t=$(cap "$1")
  shift
  if ((t == 0)); then echo "gpu-check: out of time, skipped: $*"; return 124; fi
  timeout -k 10 "$t" "$@"  # SIGKILL 10 s after SIGTERM: a process stuck in the driver may ignore it
  local rc=$?
  ((rc == 124 || rc == 137)) && echo "gpu-check: stopped at its ${t} s limit: $*"
  return "$rc"
}

{
  step "machine"
  date -u
  git log -1 --oneline 2>/dev/null || true
  # The tree may travel without its history: name the code measured by its content too.
  echo "source tree hash: $(find include tests bench tools -type f \( -name '*.hpp' -o -name '*.cuh' -o -name '*.cu' -o -name '*.cpp' \) | LC_ALL=C sort | xargs sha1sum | sha1sum | cut -c1-12)"
  nvidia-smi || { echo "gpu-check: nvidia-smi failed: no usable GPU here"; status=1; }
  nvidia-smi topo -m || true
  nvcc --version | tail -n 2
  grep -h '#define NCCL_\(MAJOR\|MINOR\|PATCH\)' /usr/local/cuda/include/nccl.h 2>/dev/null || true

  step "toolchain"
  echo "cores: $(nproc)"; cmake --version | head -n 1; "${CXX:-g++}" --version | head -n 1

  step "dependencies"
  cmake_args=()
  if [[ -d .gpu-deps/usr ]]; then
    cmake_args+=("-DCMAKE_PREFIX_PATH=$PWD/.gpu-deps/usr")
    echo "Catch2: also looking in .gpu-deps/usr (carried)"
  fi
  nccl=OFF
  if [[ -n "${NCCL_ROOT:-}" || -f /usr/local/cuda/include/nccl.h || -f /usr/include/nccl.h ]]; then
    nccl=ON
  else
    # Python's nvidia-nccl wheel: include/nccl.h and lib/libnccl.so.2 (no unversioned name).
    wheel=$(python3 -c 'import nvidia.nccl as m; print(list(m.__path__)[0])' 2>/dev/null || true)
    if [[ -n "$wheel" && -f "$wheel/include/nccl.h" ]]; then
      nccl_root="$(realpath -m "$build")/nccl-root"
      mkdir -p "$nccl_root/lib"
      ln -sfn "$wheel/include" "$nccl_root/include"
      ln -sf "$(ls "$wheel"/lib/libnccl.so* | head -n 1)" "$nccl_root/lib/libnccl.so"
      cmake_args+=("-DNCCL_ROOT=$nccl_root")
      nccl=ON
    fi
  fi
  echo "NCCL: $nccl ${cmake_args[*]}"

  step "build ($build)"
  start=$SECONDS
  within 420 cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DCOLLX_BUILD_TESTS=ON -DCOLLX_CUDA=ON \
    -DCOLLX_NCCL=$nccl -DCOLLX_BUILD_EXAMPLES=ON -DCOLLX_BUILD_BENCH=ON -DCOLLX_BUILD_TOOLS=ON \
    -DCOLLX_CHECK_HEADERS=OFF -DCOLLX_CUDA_ARCHITECTURES=90 "${cmake_args[@]}" &&
    within 420 cmake --build "$build" -j "$(nproc)" --target collx_cuda_tests collx-topo collx-run collx-perf-cuda gpu_moments ||
    { echo "gpu-check: build failed"; status=1; }
  echo "build took $((SECONDS - start)) s"

  step "topology (live discovery)"
  if [[ -x "$build/tools/collx-topo" ]]; then
    cudart=$(ls /usr/local/cuda/lib64/libcudart.so* 2>/dev/null | head -n 1)
    within 60 "$build/tools/collx-topo" ${cudart:+--cudart "$cudart"} || echo "gpu-check: collx-topo failed"
    within 60 "$build/tools/collx-topo" ${cudart:+--cudart "$cudart"} --json || echo "gpu-check: collx-topo --json failed"
  fi

  step "GPU tests"
  if [[ $status -eq 0 ]]; then
    start=$SECONDS
    # test_cuda_device (the longest, ranks as threads) last and on its own limit: one slow or hung
    # case there must not keep the process test, the examples and test_nccl from running. (ctest
    # --timeout would not do it: it only sets the limit of tests without a TIMEOUT property.)
    within 120 ctest --test-dir "$build" -R 'cuda|^test_nccl$|^example_gpu_' -E '^test_cuda_device$' --no-tests=error \
      --output-on-failure -V || status=1
    within 200 ctest --test-dir "$build" -R '^test_cuda_device$' --no-tests=error --output-on-failure -V || status=1
    echo "tests took $((SECONDS - start)) s"
  fi

  step "benchmark (collx-perf-cuda)"
  if [[ -x "$build/bench/collx-perf-cuda" ]]; then
    start=$SECONDS
    within 100 "$build/bench/collx-perf-cuda" --ranks 2 -b 8 -e 1G -f 2 || { echo "gpu-check: collx-perf-cuda failed"; status=1; }
    # One-shot against two-shot (the same bits; two-shot reads 2(n-1)/n of the vector from peers
    # instead of n-1 times it): 4 ranks, every size forced each way.
    for form in never 1; do
      echo "# --two-shot-min $form"
      within 60 "$build/bench/collx-perf-cuda" --ranks 4 -b 64K -e 256M -f 4 --rounds 2 --no-custom --two-shot-min "$form" ||
        { echo "gpu-check: collx-perf-cuda --two-shot-min $form failed"; status=1; }
    done
    # The ring (algo::ring: each rank reads 2(n-1)/n of the vector from its ring predecessor only).
    echo "# --algo ring"
    within 50 "$build/bench/collx-perf-cuda" --ranks 4 -b 64K -e 256M -f 4 --rounds 2 --no-custom --algo ring ||
      { echo "gpu-check: collx-perf-cuda --algo ring failed"; status=1; }
    # Two channels, the ring both ways (each channel its own blocks and part of the slots): against
    # the rows above (one channel where the log's "# algo::ring:" line says so), what channels
    # cost or gain here.
    echo "# --algo ring --rings 0,1,2,3/3,2,1,0"
    within 30 "$build/bench/collx-perf-cuda" --ranks 4 -b 4M -e 256M -f 8 --rounds 2 --no-custom --algo ring --rings 0,1,2,3/3,2,1,0 ||
      { echo "gpu-check: collx-perf-cuda --rings failed"; status=1; }
    # Workspaces in shared host memory (the path between GPUs without peer access), 2 ranks.
    echo "# --memory host"
    within 45 "$build/bench/collx-perf-cuda" --ranks 2 -b 8 -e 64M -f 8 --rounds 2 --no-custom --memory host ||
      { echo "gpu-check: collx-perf-cuda --memory host failed"; status=1; }
    # The ring with host workspaces (its slots and flags over PCIe).
    echo "# --memory host --algo ring"
    within 30 "$build/bench/collx-perf-cuda" --ranks 2 -b 1M -e 64M -f 8 --rounds 2 --no-custom --memory host --algo ring ||
      { echo "gpu-check: collx-perf-cuda --memory host --algo ring failed"; status=1; }
    gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
    if [[ ${gpus:-0} -ge 4 ]]; then
      within 120 "$build/bench/collx-perf-cuda" --ranks "$gpus" -b 8 -e 256M -f 8 --no-custom ||
        { echo "gpu-check: collx-perf-cuda --ranks $gpus failed"; status=1; }
      within 90 "$build/bench/collx-perf-cuda" --ranks "$gpus" -b 1M -e 256M -f 4 --no-custom --algo ring ||
        { echo "gpu-check: collx-perf-cuda --ranks $gpus --algo ring failed"; status=1; }
    fi
    echo "benchmark took $((SECONDS - start)) s"
  fi

  step "result"
  echo "gpu-check: $([[ $status -eq 0 ]] && echo passed || echo FAILED)"
  exit "$status"
} 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
echo "log: $log"
exit "$rc"
