#!/usr/bin/env bash
# bench/topo-search-time.sh: how long collx-topo takes to search rings on large synthetic machines,
# against another build of collx-topo when one is given (interleaved, median of --reps runs each).
#
#   bench/topo-search-time.sh COLLX_TOPO [PEER_COLLX_TOPO] [--reps N]
#
# Machines (nvidia-smi topo -m text, written to a temporary directory):
#   sys-N     N GPUs, each on its own NUMA node, SYS between all: every hop is staged through host
#             memory, and a NUMA node's staged traffic shares one rate (the ring bound's worst case
#             before it existed: 200 GPUs took 33 s);
#   trays-N   N GPUs in NVLink trays of 8 (NV18 inside a tray), one NUMA node per tray, SYS between
#             trays (400 GPUs took over 100 s);
# and small irregular machines, where the exact packing of up to 8 GPUs acts (ring_search.hpp):
#   dgx1-0237 GPUs 0, 2, 3 and 7 of a DGX-1 (tests/data/topologies, nvidia-smi form): GPU 7's only
#             NVLink goes to GPU 3, so rings cross the sockets through host memory;
#   dgx1-nv6  the DGX-1 with its GPU0-GPU3 bond widened from NV2 to NV6 (as A100s: 10 NVLinks on
#             GPU0 and GPU3, more than a V100 has);
#   odd-8a, odd-8b  two random 8-GPU V100 boxes (NV1/NV2 bonds, the rest PCIe, one socket); odd-8a
#             is tests/data/topologies/synthetic-8gpu-irregular-v100-topo-m.txt.
# Prints per machine the median seconds of each build, their ratio, and each build's ring line
# ("Rings: C channel(s) ... T GB/s in all"), which agree unless one build finds better rings.
set -euo pipefail

usage() { echo "usage: $0 COLLX_TOPO [PEER_COLLX_TOPO] [--reps N]" >&2; exit 2; }
reps=3
tools=()
while [ $# -gt 0 ]; do
  case $1 in
    --reps) [ $# -ge 2 ] && [[ $2 =~ ^[0-9]+$ ]] && [ "$2" -ge 1 ] || usage; reps=$2; shift 2 ;;
    -h|--help) usage ;;
    *) tools+=("$1"); shift ;;
  esac
done
[ ${#tools[@]} -ge 1 ] && [ ${#tools[@]} -le 2 ] || usage
for t in "${tools[@]}"; do [ -x "$t" ] || { echo "$0: $t is not an executable" >&2; exit 2; }; done

dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

# matrix N TRAY: GPU i is on NUMA node i / TRAY; NV18 within a node when TRAY > 1, SYS across.
matrix() {
  awk -v n="$1" -v tray="$2" 'BEGIN {
    printf "\t"; for (j = 0; j < n; ++j) printf "GPU%d\t", j; print "CPU Affinity\tNUMA Affinity"
    for (i = 0; i < n; ++i) {
      printf "GPU%d", i
      for (j = 0; j < n; ++j) printf "\t%s", i == j ? " X " : int(i / tray) == int(j / tray) ? "NV18" : "SYS"
      printf "\t%d\t%d\n", int(i / tray), int(i / tray)
    }
  }'
}

seconds() {  # seconds one `collx-topo show FILE ARGS...` takes
  local t0 t1 tool=$1
  shift
  t0=$(date +%s.%N)
  "$tool" "$@" > "$dir/out" 2>&1 || { echo "$0: $tool $* failed: $(tail -1 "$dir/out")" >&2; exit 1; }
  t1=$(date +%s.%N)
  awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f\n", b - a }'
}
median() { sort -g | awk '{ v[NR] = $1 } END { print NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

# The small machines: a DGX-1 matrix (widened), and random 8-GPU boxes (odd-8a from the tests' data).
here=$(cd "$(dirname "$0")" && pwd)
dgx1="$here/../tests/data/topologies/v100-sxm2-8gpu-dgx1-like-oneflow-topo-m.txt"
odd8a="$here/../tests/data/topologies/synthetic-8gpu-irregular-v100-topo-m.txt"
for f in "$dgx1" "$odd8a"; do
  [ -r "$f" ] || { echo "$0: missing $f" >&2; exit 1; }
done
# NV2 -> NV6 in GPU0's cell for GPU3 and GPU3's for GPU0 (rows, not the header: fields 5 and 2, the row name first).
awk '/^GPU0[ \t]/ { $5 = "NV6" } /^GPU3[ \t]/ { $2 = "NV6" } { print }' "$dgx1" > "$dir/dgx1-nv6.txt"
grep -q 'NV6' "$dir/dgx1-nv6.txt" || { echo "$0: could not widen $dgx1" >&2; exit 1; }
box() {  # box ROWS...: an 8-GPU matrix from rows of 8 cells (X on the diagonal), one NUMA node
  printf '\tGPU0\tGPU1\tGPU2\tGPU3\tGPU4\tGPU5\tGPU6\tGPU7\tCPU Affinity\tNUMA Affinity\n'
  local i=0 row
  for row in "$@"; do printf 'GPU%d\t%s\t0\t0\n' "$i" "$(echo "$row" | tr ' ' '\t')"; i=$((i + 1)); done
}
box " X  NV2  NODE NV1  NODE NV1  NODE NODE" "NV2  X  NV1  NODE NODE NODE NV1  NODE" "NODE NV1  X  NV2  NV1  NODE NODE NODE" \
    "NV1  NODE NV2  X  NODE NODE NODE NV1" "NODE NODE NV1  NODE X  NV2  NODE NV1" "NV1  NODE NODE NODE NV2  X  NV1  NODE" \
    "NODE NV1  NODE NODE NODE NV1  X  NV2" "NODE NODE NODE NV1  NV1  NODE NV2  X " | sed 's/\t\t*/\t/g' > "$dir/odd-8b.txt"

printf '%-10s %12s' machine "median s"
[ ${#tools[@]} -eq 2 ] && printf ' %12s %9s' "peer s" "peer/this"
printf '   rings\n'
for spec in sys:32 sys:100 sys:200 trays:64 trays:200 trays:400 dgx1-0237 dgx1-nv6 odd-8a odd-8b; do
  case $spec in
    sys:* | trays:*)
      kind=${spec%%:*} n=${spec##*:} name=$kind-$n
      matrix "$n" "$([ "$kind" = sys ] && echo 1 || echo 8)" > "$dir/$name.txt"
      args=("$dir/$name.txt") ;;
    dgx1-0237) name=$spec args=("$dgx1" --gpus 0,2,3,7) ;;
    odd-8a) name=$spec args=("$odd8a" --gpu V100) ;;
    dgx1-nv6) name=$spec args=("$dir/$name.txt" --gpu A100) ;;  # 10 NVLinks on GPU0: more than a V100 has
    *) name=$spec args=("$dir/$name.txt" --gpu V100) ;;
  esac
  : > "$dir/t0"; : > "$dir/t1"
  for ((r = 0; r < reps; ++r)); do  # interleaved: the two builds see the same machine load
    for k in "${!tools[@]}"; do seconds "${tools[$k]}" "${args[@]}" >> "$dir/t$k"; done
  done
  m0=$(median < "$dir/t0")
  printf '%-10s %12s' "$name" "$m0"
  if [ ${#tools[@]} -eq 2 ]; then
    m1=$(median < "$dir/t1")
    printf ' %12s %9s' "$m1" "$(awk -v a="$m0" -v b="$m1" 'BEGIN { if (a > 0) printf "%.1fx", b / a; else printf "-" }')"
  fi
  printf '\n'
  for t in "${tools[@]}"; do printf '             %s\n' "$("$t" "${args[@]}" | grep -m1 '^Rings')"; done
done
