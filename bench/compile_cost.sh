#!/usr/bin/env bash
# What a program pays to compile collx's collectives: times the compiler on generated translation
# units that include <collx/allreduce.hpp> and call allreduce on float with 0, 1 and N ops of
# their own (each a distinct (element type, op) pair), and sums the code they emit (nm sizes of
# functions). README's figures (the "What a program pays to compile" paragraph after the Quick start) come from this script.
# Usage: bench/compile_cost.sh [N (default 10)] [repeats (default 2)]
#   Environment: CXX (default g++), CXXFLAGS (default "-std=c++20 -O2"), COLLX_INCLUDE (default
#   include/ of this checkout; another checkout's, e.g. a `git worktree` of an older commit, to
#   compare).
# Prints, per TU, the median seconds over the repeats and the code bytes.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
n=${1:-10}
repeats=${2:-2}
[[ $# -le 2 && $n =~ ^[0-9]+$ && $n -ge 1 && $repeats =~ ^[0-9]+$ && $repeats -ge 1 ]] || {
  echo "usage: $0 [N >= 1 (default 10)] [repeats >= 1 (default 2)]" >&2
  exit 2
}
cxx=${CXX:-g++}
include=${COLLX_INCLUDE:-include}
read -r -a flags <<<"${CXXFLAGS:--std=c++20 -O2}"
work=$(mktemp -d "${TMPDIR:-/tmp}/collx-compile-cost.XXXXXX")
trap 'rm -rf "$work"' EXIT

gen() {  # ops -> file
  local k=$1 f=$2
  echo '#include <collx/allreduce.hpp>' >"$f"
  for ((i = 0; i < k; ++i)); do
    echo "struct op$i { static constexpr bool commutative = true; float operator()(float a, float b) const { return a * $((i + 2)).0f + b; } };" >>"$f"
    echo "void f$i(collx::communicator& c, std::span<float> x) { collx::allreduce(c, x, op$i{}); }" >>"$f"
  done
}

code_bytes() {  # object -> bytes of defined functions
  local total=0 size type
  while read -r _ size type _; do
    [[ $type == [tTwW] ]] && total=$((total + 16#$size))
  done < <(nm -S --defined-only "$1" 2>/dev/null | awk 'NF >= 4')
  echo "$total"
}

echo "$cxx ${flags[*]} ($($cxx --version | head -n 1)), -I$include, median of $repeats"
for k in 0 1 "$n"; do
  gen "$k" "$work/tu$k.cpp"
  times=()
  for ((r = 0; r < repeats; ++r)); do
    t0=$EPOCHREALTIME
    "$cxx" "${flags[@]}" -I"$include" -c "$work/tu$k.cpp" -o "$work/tu$k.o"
    times+=("$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN {print b - a}')")
  done
  median=$(printf '%s\n' "${times[@]}" | sort -n | awk '{a[NR] = $1} END {print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}')
  printf '%3d (float, op) pairs: %6.2f s  %7d bytes of code\n' "$k" "$median" "$(code_bytes "$work/tu$k.o")"
done
