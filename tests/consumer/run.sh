#!/usr/bin/env bash
# Builds and runs the three downstream consumer projects against the collx checkout SRC_DIR:
#   find_package     after `cmake --install` of SRC_DIR into a temporary prefix (with its tools:
#                    the consumer runs under the installed collx-run, found as collx::run)
#                    (and find_package_cuda, COMPONENTS cuda, when the install has collx::cuda;
#                    find_package_nccl, COMPONENTS nccl, when it has collx::nccl;
#                    find_package_mpi, COMPONENTS mpi, when it has collx::mpi)
#   add_subdirectory of SRC_DIR
#   fetchcontent     of SRC_DIR's git repository (file:// URL) at its HEAD commit: works offline,
#                    but sees committed changes only (uncommitted ones are reported below).
# Usage: tests/consumer/run.sh SRC_DIR      (honours $CXX; KEEP=1 keeps the temporary directory)
set -euo pipefail

if [[ $# -ne 1 ]]; then
  echo "usage: $0 SRC_DIR" >&2
  exit 2
fi
src=$(cd "$1" && pwd)
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/collx-consumer.XXXXXX")
if [[ "${KEEP:-0}" == 1 ]]; then
  echo "keeping $work"
else
  trap 'rm -rf "$work"' EXIT
fi

cmake_args=(-DCMAKE_BUILD_TYPE=Release)
[[ -n "${CXX:-}" ]] && cmake_args+=("-DCMAKE_CXX_COMPILER=$CXX")

step() { printf '\n--- consumer: %s\n' "$*"; }

build_and_run() {  # name, extra cmake args...
  local name=$1
  shift
  cmake -S "$here/$name" -B "$work/$name" "${cmake_args[@]}" "$@" >"$work/$name.configure.log" 2>&1 || {
    cat "$work/$name.configure.log"
    echo "consumer $name: configure failed" >&2
    return 1
  }
  cmake --build "$work/$name" -j2
  "$work/$name/consumer"
  if [[ -f "$work/$name/launcher_path.txt" ]]; then  # collx-run: built for a parent project, or installed
    "$(cat "$work/$name/launcher_path.txt")" -n 2 "$work/$name/consumer"
  fi
}

# Each consumer builds in the background, two at a time (each is one translation unit, so one
# build uses one core), into its own log; the logs are printed in order at the end.
started=()
start() {  # name, extra cmake args...: build_and_run in the background
  local name=$1
  shift
  while [[ $(jobs -rp | wc -l) -ge 2 ]]; do wait -n || true; done
  (trap 'echo $? >"$work/$name.rc"' EXIT; build_and_run "$name" "$@" >"$work/$name.log" 2>&1) &
  started+=("$name")
}

# What can stop the script comes first, before any build runs in the background.
echo "consumer: installing collx into $work/prefix (for find_package)"
cmake -S "$src" -B "$work/collx-build" "${cmake_args[@]}" -DCOLLX_BUILD_TESTS=OFF -DCOLLX_BUILD_EXAMPLES=OFF \
  -DCOLLX_BUILD_BENCH=OFF >"$work/collx-build.log" 2>&1 || {
  cat "$work/collx-build.log"
  exit 1
}
# The tools (the install takes them; find_package's consumer runs under the installed collx-run).
cmake --build "$work/collx-build" -j2 --target collx-run collx-topo >>"$work/collx-build.log" 2>&1 || {
  cat "$work/collx-build.log"
  exit 1
}
cmake --install "$work/collx-build" --prefix "$work/prefix" >/dev/null
if ! git -C "$src" rev-parse --git-dir >/dev/null 2>&1; then
  echo "consumer fetchcontent: $src is not a git checkout" >&2
  exit 1
fi
commit=$(git -C "$src" rev-parse HEAD)
if [[ -n "$(git -C "$src" status --porcelain --untracked-files=no -- CMakeLists.txt cmake include)" ]]; then
  echo "note: $src has uncommitted changes to CMakeLists.txt, cmake/ or include/; FetchContent tests commit $commit without them"
fi

start add_subdirectory -DCOLLX_SOURCE_DIR="$src"
start find_package -DCMAKE_PREFIX_PATH="$work/prefix"

if [[ -f "$work/prefix/share/cmake/collx/collxCudaTargets.cmake" ]]; then
  start find_package_cuda -DCMAKE_PREFIX_PATH="$work/prefix"
else
  echo "note: collx was installed without collx::cuda (COLLX_CUDA=AUTO found no CUDA toolkit); CUDA consumer not built"
fi

if [[ -f "$work/prefix/share/cmake/collx/collxNcclTargets.cmake" ]]; then
  start find_package_nccl -DCMAKE_PREFIX_PATH="$work/prefix"
else
  echo "note: collx was installed without collx::nccl (COLLX_NCCL=AUTO found no NCCL); NCCL consumer not built"
fi

if [[ -f "$work/prefix/share/cmake/collx/collxMpiTargets.cmake" ]]; then
  start find_package_mpi -DCMAKE_PREFIX_PATH="$work/prefix"
else
  echo "note: collx was installed without collx::mpi (COLLX_MPI=AUTO found no MPI); MPI consumer not built"
fi

echo "consumer: fetchcontent uses collx commit $commit"
start fetchcontent -DCOLLX_GIT_REPO="file://$src" -DCOLLX_GIT_TAG="$commit"

wait
declare -A what=([add_subdirectory]="add_subdirectory ($src)" [find_package]="find_package (installed in $work/prefix)"
  [find_package_cuda]="find_package COMPONENTS cuda (collx::cuda from a .cu file)"
  [find_package_nccl]="find_package COMPONENTS nccl (collx::nccl, host code linked against libnccl)"
  [find_package_mpi]="find_package COMPONENTS mpi (collx::mpi: MPI transport and bootstrap)"
  [fetchcontent]="fetchcontent (git, commit $commit)")
failed=()
for name in "${started[@]}"; do
  step "${what[$name]}"
  cat "$work/$name.log"
  [[ "$(cat "$work/$name.rc" 2>/dev/null)" == 0 ]] || failed+=("$name")
done
if [[ ${#failed[@]} -ne 0 ]]; then
  echo "consumer projects failed: ${failed[*]}" >&2
  exit 1
fi
printf '\nconsumer projects: all passed\n'
