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
#             trays (400 GPUs took over 100 s).
# Prints per machine the median seconds of each build, their ratio, and each build's ring line
# ("Rings: C channel(s) ... T GB/s in all"), which should agree.
set -euo pipefail

usage() { echo "usage: $0 COLLX_TOPO [PEER_COLLX_TOPO] [--reps N]" >&2; exit 2; }
reps=3
tools=()
while [ $# -gt 0 ]; do
  case $1 in
    --reps) [ $# -ge 2 ] || usage; reps=$2; shift 2 ;;
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

seconds() {  # seconds one `collx-topo show FILE` takes
  local t0 t1
  t0=$(date +%s.%N)
  "$1" "$2" > "$dir/out" 2>&1 || { echo "$0: $1 $2 failed: $(tail -1 "$dir/out")" >&2; exit 1; }
  t1=$(date +%s.%N)
  awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f\n", b - a }'
}
median() { sort -g | awk '{ v[NR] = $1 } END { print NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

printf '%-10s %12s' machine "median s"
[ ${#tools[@]} -eq 2 ] && printf ' %12s %9s' "peer s" "peer/this"
printf '   rings\n'
for spec in sys:32 sys:100 sys:200 trays:64 trays:200 trays:400; do
  kind=${spec%%:*} n=${spec##*:}
  file="$dir/$kind-$n.txt"
  matrix "$n" "$([ "$kind" = sys ] && echo 1 || echo 8)" > "$file"
  : > "$dir/t0"; : > "$dir/t1"
  for ((r = 0; r < reps; ++r)); do  # interleaved: the two builds see the same machine load
    for k in "${!tools[@]}"; do seconds "${tools[$k]}" "$file" >> "$dir/t$k"; done
  done
  m0=$(median < "$dir/t0")
  printf '%-10s %12s' "$kind-$n" "$m0"
  if [ ${#tools[@]} -eq 2 ]; then
    m1=$(median < "$dir/t1")
    printf ' %12s %9s' "$m1" "$(awk -v a="$m0" -v b="$m1" 'BEGIN { if (a > 0) printf "%.1fx", b / a; else printf "-" }')"
  fi
  printf '\n'
  for t in "${tools[@]}"; do printf '             %s\n' "$("$t" "$file" | grep -m1 '^Rings')"; done
done
