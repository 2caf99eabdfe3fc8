#!/bin/sh
# collx-run's command line: --help on stdout with status 0; a program that cannot run is reported
# once (not once per rank) with status 127; a bad option is an error with status 2.
# usage: collx_run_cli.sh path/to/collx-run
set -u
run=$1
fail() { echo "FAIL: $*" >&2; exit 1; }

out=$("$run" --help 2>/dev/null); rc=$?
[ $rc -eq 0 ] || fail "--help exited $rc"
case $out in *"usage: collx-run -n N"*) ;; *) fail "--help printed no usage on stdout: $out" ;; esac

err=$("$run" -n 4 /nonexistent/collx-test-program 2>&1 >/dev/null); rc=$?
[ $rc -eq 127 ] || fail "missing program exited $rc, not 127"
lines=$(printf '%s\n' "$err" | grep -c "cannot run /nonexistent/collx-test-program: No such file or directory")
[ "$lines" -eq 1 ] || fail "missing program reported $lines times: $err"

err=$("$run" -n 2 --bogus true 2>&1); rc=$?
[ $rc -eq 2 ] || fail "unknown option exited $rc, not 2"
case $err in *"unknown option --bogus"*) ;; *) fail "unknown option not named: $err" ;; esac
echo "collx-run command line: OK"
