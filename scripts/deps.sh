#!/usr/bin/env bash
# Installs, with apt-get (Debian 12), the packages collx's build, tests and CI need, if any is
# missing: does nothing (and needs no network) when all are there. Idempotent.
#   catch2                Catch2 v2 (tests)
#   cmake make g++        the build
#   ninja-build           .ci/run builds one pass with Ninja (CMake's other common generator)
#   clang libclang-rt-dev clang++ and its sanitizer runtimes (the TSan pass of .ci/run)
#   git                   FetchContent in tests/consumer/run.sh
#   openmpi-bin libopenmpi-dev  the test that launches ranks with Open MPI's mpirun; bench peers
#   zlib1g-dev            examples/train_digits reads the gzipped digits with zlib
#   procps                pgrep, in tests/collx_run_cli.sh (no rank's children left running)
#   libhwloc-dev pkg-config  hwloc CPU discovery (COLLX_TOPO_HWLOC, .ci/run's ASan pass)
# Usage: scripts/deps.sh [extra-package...]
set -euo pipefail

packages=(catch2 cmake make ninja-build g++ clang libclang-rt-dev git ca-certificates openmpi-bin libopenmpi-dev zlib1g-dev procps libhwloc-dev pkg-config "$@")
missing=()
for p in "${packages[@]}"; do
  if [[ "$(dpkg-query -W -f='${db:Status-Abbrev}' "$p" 2>/dev/null)" != ii* ]]; then
    missing+=("$p")
  fi
done
if [[ ${#missing[@]} -eq 0 ]]; then
  exit 0
fi

echo "deps: installing ${missing[*]}"
sudo=()
if [[ $(id -u) -ne 0 ]]; then
  if command -v sudo >/dev/null; then
    sudo=(sudo)
  else
    echo "deps: missing ${missing[*]} and not root; install them with apt-get" >&2
    exit 1
  fi
fi
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -qq
"${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
