#!/usr/bin/env bash
# bench/call-instructions.sh: the user-space instructions one small collective call costs each
# rank, counted by valgrind's callgrind: a figure that does not move with the machine's load, for
# comparing two builds of collx-perf on a shared, noisy machine (a small call's time is a few
# hundred nanoseconds, and other work on the machine changes it by 2x).
#
#   bench/call-instructions.sh COLLX_PERF [PEER_COLLX_PERF] [--colls "allreduce all_gather ..."]
#                              [--bytes SIZE] [--ranks N]
#
# Runs COLLX_PERF (and PEER_COLLX_PERF, another build) with N ranks (default 2) on one CPU
# (taskset -c 0): with more ranks than CPUs collx's waits sleep at once instead of polling, so the
# count does not depend on how long a peer takes. Counts a run of 10000 and one of 20000 timed
# iterations and divides the difference by the calls between them, which leaves start-up out:
# 20000 (collx-perf runs the out-of-place then the in-place form), 10000 for all_to_all and
# sendrecv (out of place only). Waits (futex) cost
# kernel time that is not counted. Needs valgrind (Debian: apt-get install valgrind). About 30 s per
# collective and build.
set -euo pipefail

usage() { echo "usage: $0 COLLX_PERF [PEER_COLLX_PERF] [--colls \"C ...\"] [--bytes SIZE] [--ranks N]" >&2; exit 2; }
colls="allreduce reduce_scatter all_gather broadcast all_to_all"
bytes=32
ranks=2
bins=()
while [ $# -gt 0 ]; do
  case $1 in
    --colls) [ $# -ge 2 ] && [ -n "$2" ] || usage; colls=$2; shift 2 ;;
    --bytes) [ $# -ge 2 ] && [[ $2 =~ ^[0-9]+[KMG]?$ ]] || usage; bytes=$2; shift 2 ;;
    --ranks) [ $# -ge 2 ] && [[ $2 =~ ^[0-9]+$ ]] && [ "$2" -ge 2 ] && [ "$2" -le 64 ] || usage; ranks=$2; shift 2 ;;
    -h|--help) usage ;;
    *) bins+=("$1"); shift ;;
  esac
done
[ ${#bins[@]} -ge 1 ] && [ ${#bins[@]} -le 2 ] || usage
for b in "${bins[@]}"; do [ -x "$b" ] || { echo "$0: $b is not an executable" >&2; exit 2; }; done
command -v valgrind >/dev/null || { echo "$0: valgrind not found (apt-get install valgrind)" >&2; exit 2; }
command -v taskset >/dev/null || { echo "$0: taskset not found (util-linux)" >&2; exit 2; }

dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

for c in $colls; do
  case $c in allreduce|reduce_scatter|all_gather|broadcast|reduce|all_to_all|sendrecv) ;;
    *) echo "$0: unknown collective '$c' (allreduce reduce_scatter all_gather broadcast reduce all_to_all sendrecv)" >&2; exit 2 ;;
  esac
done

# count BIN COLL N: writes to $dir/counts one "Ir" total per rank of a run with N timed
# iterations, largest first (with --ranks, collx-perf starts the ranks as children of a launching
# process, which does less).
count() {
  rm -f "$dir"/cg.*
  if ! taskset -c 0 valgrind --tool=callgrind --trace-children=yes --callgrind-out-file="$dir/cg.%p" \
      "$1" "$2" --ranks "$ranks" -b "$bytes" -e "$bytes" -n "$3" -w 10 -c 0 --bind none > "$dir/log" 2>&1; then
    echo "$0: $1 $2 failed; its output:" >&2
    grep -v '^==' "$dir/log" | tail -n 20 >&2
    exit 1
  fi
  for f in "$dir"/cg.*; do awk '$1 == "totals:" {print $2}' "$f"; done | sort -rn | head -n "$ranks" > "$dir/counts"
  if [ "$(wc -l < "$dir/counts")" -lt "$ranks" ]; then
    echo "$0: $1 did not start $ranks ranks (is it collx-perf?)" >&2
    exit 1
  fi
}

printf '%-16s %-s\n' "collective" "instructions per call at $bytes bytes, $ranks ranks (min / max over ranks)"
for c in $colls; do
  line=$(printf '%-16s' "$c")
  for b in "${bins[@]}"; do
    count "$b" "$c" 10000
    mapfile -t small < "$dir/counts"
    count "$b" "$c" 20000
    mapfile -t large < "$dir/counts"
    calls=20000
    case $c in all_to_all|sendrecv) calls=10000 ;; esac
    per=()
    for i in "${!large[@]}"; do per+=($(( (large[i] - small[i]) / calls ))); done
    lo=$(printf '%s\n' "${per[@]}" | sort -n | head -n 1)
    hi=$(printf '%s\n' "${per[@]}" | sort -n | tail -n 1)
    line+=$(printf '  %6d / %-6d' "$lo" "$hi")
  done
  if [ ${#bins[@]} -eq 2 ]; then
    echo "$line   ($(basename "${bins[0]}") | $(basename "${bins[1]}"))"
  else
    echo "$line"
  fi
done
