#!/usr/bin/env bash
# Register use and spills of collx's device kernels as ptxas reports them, without a GPU: compiles
# tests/cuda/test_cuda_device.cu (which instantiates every device collective on float, half, an
# 8-byte non-commutative struct op and a 12-byte struct, and the reductions on float64) for one architecture with -Xptxas -v and
# lists each kernel that spills to local memory, with the totals. Spills in a memory-bound kernel
# add local-memory traffic to every pass of its loop; the kernels are capped at 64 registers a
# thread (__launch_bounds__(512, 2): two resident blocks per multiprocessor).
# usage: bench/ptxas-spills.sh BUILD [ARCH]   BUILD: a build directory configured (Unix Makefiles)
#        with -DCOLLX_CUDA=ON -DCOLLX_BUILD_TESTS=ON (its include flags are reused); ARCH default 90.
# About a minute of CPU.
set -euo pipefail
[[ -d ${1:-} ]] || { echo "usage: bench/ptxas-spills.sh BUILD [ARCH] (BUILD: an existing build directory)" >&2; exit 2; }
build=$(cd "$1" && pwd)  # absolute: the compile below runs from inside it
arch=${2:-90}
cd "$(dirname "${BASH_SOURCE[0]}")/.."
repo=$(pwd)
rsp="$build/tests/cuda/CMakeFiles/test_cuda_device.dir/includes_CUDA.rsp"
[[ -f $rsp ]] || {
  echo "ptxas-spills: $rsp not found: configure $build with CMake's default generator (Unix Makefiles, which writes" \
    "the include list there) and -DCOLLX_CUDA=ON -DCOLLX_BUILD_TESTS=ON" >&2
  exit 1
}
nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
# The include paths in the response file are absolute; host code at -O1 as in CI (device code -O3).
(cd "$build/tests/cuda" && "$nvcc" --options-file "$rsp" -O1 "--generate-code=arch=compute_$arch,code=[sm_$arch]" \
  --expt-relaxed-constexpr -std=c++20 -Xptxas -v -c "$repo/tests/cuda/test_cuda_device.cu" -o "$out/t.o") > "$out/log" 2>&1 ||
  { cat "$out/log" >&2; exit 1; }
awk '
  /Compiling entry function/ { match($0, /'"'"'[^'"'"']+'"'"'/); name = substr($0, RSTART + 1, RLENGTH - 2); kernels++ }
  /bytes spill stores/ { st = $5; ld = $9; if (st + ld > 0) { printf "%6d %6d %s\n", st, ld, name; spilling++ } stores += st; loads += ld }
  END { printf "sm_'"$arch"': %d kernels, %d spill; %d bytes of spill stores, %d of spill loads\n", kernels, spilling, stores, loads > "/dev/stderr" }
' "$out/log" | c++filt | sed -e 's/collx::v0::gpu::device_detail:://g' -e 's/collx::v0:://g' | cut -c1-160 |
  { echo " store   load kernel (bytes per thread)"; cat; }
