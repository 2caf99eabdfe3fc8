#!/bin/sh
# collx-run's command line and process handling: --help on stdout with status 0; a program that
# cannot run is reported once (not once per rank) with status 127; a bad option is an error with
# status 2; a failing rank is named and the others stop with what they started; SIGINT is
# forwarded; a rank that ignores SIGTERM is killed after the grace period, and nothing else. With a
# collx program (collx-perf) as well: a misspelt COLLX_ variable is reported once per job.
# usage: collx_run_cli.sh path/to/collx-run [path/to/collx-perf]
set -u
run=$1
perf=${2:-}
fail() { echo "FAIL: $*" >&2; exit 1; }

out=$("$run" --help 2>/dev/null); rc=$?
[ $rc -eq 0 ] || fail "--help exited $rc"
case $out in *"usage: collx-run -n N"*) ;; *) fail "--help printed no usage on stdout: $out" ;; esac

err=$("$run" -n 4 /nonexistent/collx-test-program 2>&1 >/dev/null); rc=$?
[ $rc -eq 127 ] || fail "missing program exited $rc, not 127"
lines=$(printf '%s\n' "$err" | grep -c "cannot run /nonexistent/collx-test-program: No such file or directory")
[ "$lines" -eq 1 ] || fail "missing program reported $lines times: $err"

"$run" -n2 true || fail "-n2 (attached) was refused"
"$run" --np=2 true || fail "--np=2 was refused"
err=$("$run" -n 2 -n 3 true 2>&1); rc=$?
[ $rc -eq 2 ] || fail "-n given twice exited $rc, not 2"
case $err in *"-n given twice"*) ;; *) fail "-n given twice not said: $err" ;; esac

if [ -n "$perf" ]; then
  err=$(COLLX_TIMEOUTS=30 "$run" -n 3 "$perf" allreduce -b 8 -e 8 -n 1 -w 0 2>&1 >/dev/null); rc=$?
  [ $rc -eq 0 ] || fail "collx-perf under collx-run exited $rc: $err"
  lines=$(printf '%s\n' "$err" | grep -c "COLLX_TIMEOUTS is not a collx variable; did you mean COLLX_TIMEOUT?")
  [ "$lines" -eq 1 ] || fail "a misspelt variable was reported $lines times, not once per job: $err"
fi

err=$("$run" -n 2 --bogus true 2>&1); rc=$?
[ $rc -eq 2 ] || fail "unknown option exited $rc, not 2"
case $err in *"unknown option --bogus"*) ;; *) fail "unknown option not named: $err" ;; esac
# A failing rank: one line says which; the other ranks' process groups (what they started too) stop.
err=$("$run" -n 3 sh -c 'if [ $COLLX_RANK = 1 ]; then sleep 0.3; exit 7; fi; sleep 31.4159' 2>&1); rc=$?
[ $rc -eq 7 ] || fail "failing rank: exited $rc, not 7"
case $err in *"rank 1 (pid "*") exited with status 7; stopping the other ranks"*) ;; *) fail "failing rank not named: $err" ;; esac
sleep 0.3
if pgrep -f "sleep 31.4159" >/dev/null; then pkill -f "sleep 31.4159"; fail "the other ranks' children were left running"; fi

# SIGINT to collx-run reaches every rank's group; the status says so (128 + 2).
"$run" -n 2 sh -c 'sleep 32.7183' &
pid=$!
sleep 0.5
kill -INT $pid
wait $pid; rc=$?
[ $rc -eq 130 ] || fail "SIGINT: exited $rc, not 130"
sleep 0.3
if pgrep -f "sleep 32.7183" >/dev/null; then pkill -f "sleep 32.7183"; fail "SIGINT was not forwarded to the ranks"; fi

# A rank that ignores SIGTERM is killed after the grace period, and nothing else is: run in a PID
# namespace of its own, so that a regression (kill(-1, SIGKILL) as root) cannot reach the machine.
if unshare -pf true 2>/dev/null; then
  out=$(unshare -pf sh -c 'sleep 60 & b=$!
    "$0" -n 2 sh -c "trap \"\" TERM; if [ \$COLLX_RANK = 0 ]; then sleep 0.3; exit 3; fi; sleep 20" 2>/dev/null; rc=$?
    if kill -0 $b 2>/dev/null; then echo "survived $rc"; kill $b; else echo "killed $rc"; fi' "$run")
  [ "$out" = "survived 3" ] || fail "escalation to SIGKILL: $out (want: survived 3)"
else
  echo "SKIPPED: no PID namespace here (unshare -pf), escalation to SIGKILL not checked"
fi
echo "collx-run command line: OK"
