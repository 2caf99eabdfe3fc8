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
#             is tests/data/topologies/synthetic-8gpu-irregular-v100-topo-m.txt;
# and irregular 12-16-GPU NVLink meshes, past the exact packing, where the greedy packing's trials
# used to end on a ring that no longer fit and spend the per-ring budget giving up on it, at every
# speed (1.4-1.7 s each quiet before 63f3ed8: four of the five slowest of the 27 random meshes of its
# review, the fifth being another 14-GPU H100 one):
#   rand-N-GPU-sSEED  N GPUs of GPU (H100: at most 18 NVLinks a GPU, bonds NV1..NV6, 0.6*N*18 tries;
#             A100: 12 links, NV1..NV4, 0.8*N*12 tries), made by mesh below: each try draws a pair
#             of GPUs and a bond width from a 32-bit LCG seeded with SEED and adds the bond if both
#             GPUs have the links left; GPUs 0..N/2-1 on NUMA node 0, the rest on node 1, NODE or SYS
#             between unbonded GPUs. rand-14-H100-s4201, rand-14-H100-s4202, rand-12-A100-s2401 and
#             rand-16-H100-s4802 are that review's meshes of those names, byte for byte.
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

# mesh N LINKS MAXBOND SEED FILL: a random NVLink mesh of N GPUs, at most LINKS NVLinks a GPU and
# MAXBOND a pair, from FILL*N*LINKS tries of the LCG s = s * 1664525 + 1013904223 (mod 2^32; the draw
# is s >> 8): a try draws GPU i, GPU j (i == j skips the try) and a bond of 1..MAXBOND, cut to the
# links i and j have left, and skips it when nothing is left or the pair would pass MAXBOND.
# awk's doubles hold s * 1664525 + 1013904223 exactly (under 2^53): no 64-bit integers needed (mawk checked).
mesh() {
  awk -v n="$1" -v links="$2" -v maxbond="$3" -v s="$4" -v fill="$5" '
    function draw() { s = s * 1664525 + 1013904223; s -= int(s / 4294967296) * 4294967296; return int(s / 256) }
    BEGIN {
      tries = int(fill * n * links)
      for (k = 0; k < tries; ++k) {
        i = draw() % n; j = draw() % n
        if (i == j) continue
        b = 1 + draw() % maxbond
        if (links - used[i] < b) b = links - used[i]
        if (links - used[j] < b) b = links - used[j]
        if (b <= 0 || nv[i, j] + b > maxbond) continue
        nv[i, j] += b; nv[j, i] += b; used[i] += b; used[j] += b
      }
      h = int(n / 2)
      printf "\t"; for (j = 0; j < n; ++j) printf "GPU%d\t", j; print "CPU Affinity\tNUMA Affinity"
      for (i = 0; i < n; ++i) {
        printf "GPU%d", i
        for (j = 0; j < n; ++j) printf "\t%s", (i == j ? " X " : nv[i, j] ? "NV" nv[i, j] : (i < h) != (j < h) ? "SYS" : "NODE")
        printf "\t%d\t%d\n", (i < h ? 0 : 1), (i < h ? 0 : 1)
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

printf '%-18s %12s' machine "median s"
[ ${#tools[@]} -eq 2 ] && printf ' %12s %9s' "peer s" "peer/this"
printf '   rings\n'
for spec in sys:32 sys:100 sys:200 trays:64 trays:200 trays:400 dgx1-0237 dgx1-nv6 odd-8a odd-8b \
            rand-14-H100-s4201 rand-14-H100-s4202 rand-12-A100-s2401 rand-16-H100-s4802; do
  case $spec in
    rand-*)  # rand-N-GPU-sSEED
      IFS=- read -r _ n gpu seed <<< "$spec"
      case $gpu in
        H100) mesh "$n" 18 6 "${seed#s}" 0.6 ;;
        A100) mesh "$n" 12 4 "${seed#s}" 0.8 ;;
        *) echo "$0: no mesh parameters for $gpu" >&2; exit 1 ;;
      esac > "$dir/$spec.txt"
      name=$spec args=("$dir/$spec.txt" --gpu "$gpu") ;;
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
  printf '%-18s %12s' "$name" "$m0"
  if [ ${#tools[@]} -eq 2 ]; then
    m1=$(median < "$dir/t1")
    printf ' %12s %9s' "$m1" "$(awk -v a="$m0" -v b="$m1" 'BEGIN { if (a > 0) printf "%.1fx", b / a; else printf "-" }')"
  fi
  printf '\n'
  for t in "${tools[@]}"; do printf '             %s\n' "$("$t" "${args[@]}" | grep -m1 '^Rings')"; done
done
