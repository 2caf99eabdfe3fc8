#!/bin/sh
# collx-run's command line and process handling: --help on stdout with status 0; a program that
# cannot run is reported once (not once per rank) with status 127; a bad option is an error with
# status 2; a failing rank is named and the others stop with what they started; SIGINT is
# forwarded; a rank that ignores SIGTERM is killed after the grace period, and nothing else. With a
# collx program (collx-perf) as well: a misspelt COLLX_ variable is reported once per job.
# usage: collx_run_cli.sh path/to/collx-run [path/to/collx-perf [path/to/test_launcher_env]]
set -u
run=$1
perf=${2:-}
launcher_env=${3:-}
fail() { echo "FAIL: $*" >&2; exit 1; }

out=$("$run" --help 2>/dev/null); rc=$?
[ $rc -eq 0 ] || fail "--help exited $rc"
case $out in *"usage: collx-run -n N"*) ;; *) fail "--help printed no usage on stdout: $out" ;; esac
case $out in *"-np N"*"--np=N"*"COLLX_BIND"*) ;; *) fail "--help does not list -np, --np=N and COLLX_BIND: $out" ;; esac

err=$("$run" -n 4 /nonexistent/collx-test-program 2>&1 >/dev/null); rc=$?
[ $rc -eq 127 ] || fail "missing program exited $rc, not 127"
lines=$(printf '%s\n' "$err" | grep -c "cannot run /nonexistent/collx-test-program: No such file or directory")
[ "$lines" -eq 1 ] || fail "missing program reported $lines times: $err"
err=$("$run" -n 2 /tmp 2>&1 >/dev/null); rc=$?
[ $rc -eq 127 ] || fail "a directory as the program exited $rc, not 127"
case $err in *"cannot run /tmp: Is a directory"*) ;; *) fail "a directory as the program not said as such: $err" ;; esac
err=$("$run" -n 2 '' 2>&1 >/dev/null); rc=$?
[ $rc -eq 2 ] || fail "an empty program name exited $rc, not 2"
case $err in *"the program name is empty"*) ;; *) fail "an empty program name not said as such: $err" ;; esac
# A script whose #! interpreter does not exist: execvp says "No such file or directory" of a file
# that is there, once per rank; said once, naming the interpreter. The same for CRLF line endings
# (the kernel looks for "/bin/sh\r"). In the working directory (the build's), not $TMPDIR, which
# may be mounted noexec.
script=$(mktemp ./collx-run-cli.XXXXXX) || fail "mktemp"
crlf=$(mktemp ./collx-run-cli-crlf.XXXXXX) || fail "mktemp"
elf=$(mktemp ./collx-run-cli-elf.XXXXXX) || fail "mktemp"
plain=$(mktemp ./collx-run-cli-plain.XXXXXX) || fail "mktemp"
trap 'rm -f "$script" "$crlf" "$elf" "$plain"' EXIT
printf '#!/nonexistent/collx-interpreter -x\necho hello\n' > "$script" && chmod +x "$script"
err=$("$run" -n 3 "$script" 2>&1 >/dev/null); rc=$?
[ $rc -eq 127 ] || fail "a script with a missing interpreter exited $rc, not 127"
lines=$(printf '%s\n' "$err" | grep -c "cannot run $script: its interpreter /nonexistent/collx-interpreter (the #! line) does not exist")
[ "$lines" -eq 1 ] || fail "a missing interpreter reported $lines times, not once: $err"
printf '#!/bin/sh\r\necho hello\r\n' > "$crlf" && chmod +x "$crlf"
err=$("$run" -n 3 "$crlf" 2>&1 >/dev/null); rc=$?
[ $rc -eq 127 ] || fail "a CRLF script exited $rc, not 127"
lines=$(printf '%s\n' "$err" | grep -c "cannot run $crlf: its #! line ends in a carriage return (CRLF line endings")
[ "$lines" -eq 1 ] || fail "a CRLF script reported $lines times, not once: $err"
# An ELF file the kernel cannot load (cut short here) is said to be one; execvp would hand it to
# /bin/sh, which reads the binary as commands. A script without #! still runs with /bin/sh.
printf '\177ELF\002\001\001\000junk\n(\n' > "$elf" && chmod +x "$elf"
err=$("$run" -n 2 "$elf" 2>&1 >/dev/null); rc=$?
[ $rc -eq 127 ] || fail "a damaged ELF file exited $rc, not 127: $err"
case $err in *"cannot run $elf: Exec format error (an ELF file this machine cannot load"*) ;; *) fail "a damaged ELF file not said as such: $err" ;; esac
printf '%s\n' "$err" | grep -q "^$elf: " && fail "a damaged ELF file was run by the shell: $err"
printf 'echo "plain script, rank $COLLX_RANK"\n' > "$plain" && chmod +x "$plain"
out=$("$run" -n 2 "$plain" 2>&1) || fail "a script without #! failed: $out"
case $out in *"plain script, rank 0"*"plain script, rank 1"*|*"plain script, rank 1"*"plain script, rank 0"*) ;; *) fail "a script without #! did not run with /bin/sh: $out" ;; esac

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
  # A results file that cannot be written is a usage error before the run, not a success after it.
  err=$("$perf" allreduce -b 8 -e 8 -n 1 -w 0 --ranks 2 --json /nonexistent/collx.json 2>&1 >/dev/null); rc=$?
  [ $rc -eq 2 ] || fail "collx-perf --json /nonexistent/... exited $rc, not 2: $err"
  case $err in *"cannot write /nonexistent/collx.json"*) ;; *) fail "unwritable --json not named: $err" ;; esac
  # A directory passed the check and failed after the whole sweep, with status 1.
  jdir=$(mktemp -d)
  err=$("$perf" allreduce -b 8 -e 8 -n 1 -w 0 --ranks 2 --json "$jdir" 2>&1 >/dev/null); rc=$?
  rmdir "$jdir"
  [ $rc -eq 2 ] || fail "collx-perf --json DIRECTORY exited $rc, not 2: $err"
  # Bad shared-memory settings are usage errors, said once before any rank starts (each rank said
  # them and the status was 1).
  for bad in COLLX_SHM_BYTES_PER_PEER=100 COLLX_CMA=maybe; do
    err=$(env "$bad" "$perf" allreduce -b 8 -e 8 --ranks 2 2>&1 >/dev/null); rc=$?
    [ $rc -eq 2 ] || fail "collx-perf with $bad exited $rc, not 2: $err"
    case $err in *"${bad%%=*}"*) ;; *) fail "collx-perf with $bad did not name the variable: $err" ;; esac
  done
  # A tool that launches itself names itself, not collx-run, when a rank fails (a staging size
  # that is well formed but too large for 2 ranks' segment fails in the ranks).
  err=$(COLLX_SHM_BYTES_PER_PEER=4611686018427387904 "$perf" allreduce -b 8 -e 8 --ranks 2 2>&1 >/dev/null); rc=$?
  [ $rc -ne 0 ] || fail "collx-perf with a too large COLLX_SHM_BYTES_PER_PEER exited 0"
  case $err in *"collx-perf: rank "*") exited with status"*) ;; *) fail "collx-perf's failing rank not reported as collx-perf's: $err" ;; esac
  # collx-run inside collx-run: each inner job gets its own id (they inherited one and collided).
  err=$(COLLX_TIMEOUT=30 "$run" -n 2 "$run" -n 2 "$perf" allreduce -b 8 -e 8 -n 1 -w 0 2>&1 >/dev/null); rc=$?
  [ $rc -eq 0 ] || fail "collx-run inside collx-run exited $rc: $err"
  # --bind none: the ranks --ranks starts keep the CPUs collx-perf may use (it changed nothing:
  # launch_program pinned them anyway).
  own=$("$perf" allreduce -b 8 -e 8 -n 1 -w 0 --transport threads 2>/dev/null | sed -n 's/^# CPU affinity per rank: 0:\({[^}]*}\).*/\1/p')
  got=$("$perf" allreduce -b 8 -e 8 -n 1 -w 0 --ranks 2 --bind none 2>/dev/null | sed -n 's/^# CPU affinity per rank: //p')
  [ -n "$own" ] && [ "$got" = "0:$own 1:$own" ] || fail "collx-perf --ranks 2 --bind none pinned its ranks: '$got' (its own CPUs: '$own')"
  err=$("$perf" allreduce -b 8 -e 64 -i 0 2>&1 >/dev/null); rc=$?
  [ $rc -eq 2 ] || fail "collx-perf -i 0 with -b < -e exited $rc, not 2: $err"
  # A size near 2^64 wrapped the buffer arithmetic (a 4 KiB buffer, then a crash).
  err=$("$perf" allreduce -b 18446744073709551612 -e 18446744073709551612 --ranks 2 2>&1 >/dev/null); rc=$?
  [ $rc -eq 2 ] || fail "collx-perf -e near 2^64 exited $rc, not 2: $err"
  case $err in *"more than 1 PiB"*) ;; *) fail "collx-perf -e near 2^64 not said: $err" ;; esac
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
# Ranks that exited 0 before the failure are named with it (a rank that returned early is often
# why its peers failed); ranks 3 and 1 leave at once, rank 0 fails 0.3 s later, rank 2 is stopped.
err=$("$run" -n 4 sh -c 'case $COLLX_RANK in 0) sleep 0.3; exit 5;; 2) sleep 31.4159;; esac; exit 0' 2>&1); rc=$?
[ $rc -eq 5 ] || fail "failing rank after two early exits: exited $rc, not 5"
case $err in *"rank 0 (pid "*") exited with status 5; stopping the other ranks (ranks 1, 3 had already exited with status 0)"*) ;;
  *) fail "ranks that had exited 0 before the failure not named: $err" ;; esac
case $err in *"rank 2"*) fail "rank 2, stopped after the failure, named: $err" ;; esac

# A rank that ignores SIGTERM and SIGINT is killed 3 s after the first signal, however often the
# signal comes again (each one used to start the grace period over).
"$run" -n 1 sh -c 'trap "" TERM INT; sleep 27.1828' & lp=$!
sleep 0.5
t0=$(date +%s%N)
for _ in $(seq 16); do kill -INT $lp 2>/dev/null || break; sleep 0.5; done  # for up to 8 s
wait $lp; rc=$?
ms=$(( ($(date +%s%N) - t0) / 1000000 ))
[ $rc -eq 130 ] || fail "collx-run stopped by SIGINT exited $rc, not 130"
[ $ms -lt 6000 ] || fail "a rank ignoring SIGTERM was killed after $ms ms of repeated SIGINTs, not about 3 s"
sleep 0.2
if pgrep -f "sleep 27.1828" >/dev/null; then pkill -f "sleep 27.1828"; fail "the rank ignoring SIGTERM was left running"; fi

# Every rank of one start gets the same COLLX_LAUNCH_ID, and another start another one (the
# shared-memory transport keeps two starts given one COLLX_JOB_ID apart by it: test_shm).
ids=$(COLLX_JOB_ID=same "$run" -n 3 sh -c 'echo "$COLLX_LAUNCH_ID"' | sort -u)
[ -n "$ids" ] && [ "$(printf '%s\n' "$ids" | wc -l)" -eq 1 ] || fail "the ranks' COLLX_LAUNCH_IDs: '$ids' (want one, not empty)"
other=$(COLLX_JOB_ID=same "$run" -n 1 sh -c 'echo "$COLLX_LAUNCH_ID"')
[ "$other" != "$ids" ] || fail "two starts got the same COLLX_LAUNCH_ID $ids"

# A bad COLLX_BIND is one message before any rank starts, as a usage error.
err=$(COLLX_BIND=bogus "$run" -n 3 true 2>&1); rc=$?
[ $rc -eq 2 ] || fail "COLLX_BIND=bogus exited $rc, not 2"
lines=$(printf '%s\n' "$err" | grep -c "COLLX_BIND='bogus' is not valid")
[ "$lines" -eq 1 ] || fail "COLLX_BIND=bogus reported $lines times, not once: $err"

# So are the variables every rank would refuse when it makes its communicator (each rank said
# them, with status 1).
for bad in COLLX_CMA=maybe COLLX_SHM_BYTES_PER_PEER=100 COLLX_TIMEOUT=-1 COLLX_SEGMENT_BYTES=4X COLLX_ALGO=barrier:ring COLLX_CONNECT_TIMEOUT=0 \
           COLLX_DEBUG=verbose COLLX_DEBUG_FILE=/tmp/collx-%r.log; do
  err=$(env "$bad" "$run" -n 3 true 2>&1); rc=$?
  [ $rc -eq 2 ] || fail "collx-run with $bad exited $rc, not 2: $err"
  lines=$(printf '%s\n' "$err" | grep -c "^collx-run: ${bad%%=*}=")  # the error, not the usage text
  [ "$lines" -eq 1 ] || fail "collx-run with $bad did not name the variable: $err"
  lines=$(printf '%s\n' "$err" | grep -c "")
  [ "$lines" -eq 1 ] || fail "collx-run with $bad said $lines lines, not one (no usage text for the environment): $err"
done
# A well-formed staging size too large for this job's segment (3^2 pairs past 2^62 bytes) too: the
# check took no world size, so the ranks started and each refused it.
err=$(COLLX_SHM_BYTES_PER_PEER=1152921504606846976 "$run" -n 3 true 2>&1); rc=$?
[ $rc -eq 2 ] || fail "collx-run with a COLLX_SHM_BYTES_PER_PEER too large for 3 ranks exited $rc, not 2: $err"
case $err in "collx-run: COLLX_SHM_BYTES_PER_PEER"*"too large: the segment of 3 ranks would exceed 2^62 bytes") ;;
  *) fail "collx-run with a too large COLLX_SHM_BYTES_PER_PEER: $err" ;; esac
err=$(COLLX_SHM_BYTES_PER_PEER=1152921504606846976 "$run" -n 1 true 2>&1); rc=$?
[ $rc -eq 0 ] || fail "collx-run -n 1 with 2^60 bytes per pair (one pair: within 2^62) exited $rc: $err"

# Ranks that end together: the one killed by a signal is the failure named, not a peer that exited
# with an error just after it. collx-run is stopped while both end, so that one pass finds both.
tmp=$(mktemp -d)
"$run" -n 2 sh -c 'touch "$0/up.$COLLX_RANK"; while [ ! -e "$0/go" ]; do sleep 0.02; done
  if [ $COLLX_RANK = 1 ]; then kill -KILL $$; fi; sleep 0.2; exit 5' "$tmp" 2>"$tmp/err" &
pid=$!
n=0; while [ ! -e "$tmp/up.0" ] || [ ! -e "$tmp/up.1" ]; do sleep 0.05; n=$((n + 1)); [ $n -lt 600 ] || fail "ranks did not start"; done
kill -STOP $pid
touch "$tmp/go"
sleep 1.5
kill -CONT $pid
wait $pid; rc=$?
err=$(cat "$tmp/err")
[ $rc -eq 137 ] || fail "rank killed by SIGKILL beside a rank that exited 5: exited $rc, not 137: $err"
case $err in *"rank 1 (pid "*") was killed by signal 9"*) ;; *) fail "the killed rank was not the one named: $err" ;; esac

# A rank killed by a signal whose process is not reapable yet (a multi-threaded process is a zombie
# until its last thread ends; longer while it dumps core) when its peer, having seen it dead,
# exits 1: collx-run waits for it, and the signal is the failure named (was: status 1).
if [ -n "$launcher_env" ]; then
  err=$("$run" -n 2 "$launcher_env" collx-run leader-exits-first 2>&1 >/dev/null); rc=$?
  [ $rc -eq 137 ] || fail "rank killed by SIGKILL while its peer exited 1 first: exited $rc, not 137: $err"
  case $err in *"rank 1 (pid "*") was killed by signal 9"*) ;; *) fail "the killed rank was not the one named: $err" ;; esac

  # SIGTERM to collx-run during that wait (up to 1 s) is forwarded at once, not after it: rank 1's
  # last thread (10 s left) ends, and so does collx-run, well within the second (was: 0.96 s).
  # Two tries, so that one stall of a loaded machine does not fail it.
  quick=no
  for try in 1 2; do
    rm -f "$tmp/r0-failed"
    "$run" -n 2 "$launcher_env" collx-run leader-exits-then-waits "$tmp/r0-failed" >/dev/null 2>&1 &
    pid=$!
    n=0; while [ ! -e "$tmp/r0-failed" ]; do sleep 0.01; n=$((n + 1)); [ $n -lt 3000 ] || fail "rank 0 did not fail"; done
    sleep 0.05
    t0=$(date +%s%N); kill -TERM $pid; wait $pid; t1=$(date +%s%N)
    [ $(((t1 - t0) / 1000000)) -lt 700 ] && { quick=yes; break; }
  done
  [ $quick = yes ] || fail "SIGTERM during the wait for a zombie rank took $(((t1 - t0) / 1000000)) ms to stop the job"
fi

# A rank killed while a program it started runs: that program stops with the other ranks (it was
# left running, re-parented to init), even when it ignores SIGTERM and the other ranks are gone
# before the grace period ends (SIGKILL then). Dead means gone or a zombie (pid 1 may not reap).
alive() { st=$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null); [ -n "$st" ] && [ "$st" != Z ]; }
"$run" -n 2 sh -c 'if [ $COLLX_RANK = 1 ]; then (trap "" TERM; exec sleep 34.2) & echo $! > "$0/child"; echo $$ > "$0/shpid"; wait; fi
  exec sleep 35.3' "$tmp" 2>/dev/null &
pid=$!
n=0; while [ ! -s "$tmp/child" ] || [ ! -s "$tmp/shpid" ]; do sleep 0.05; n=$((n + 1)); [ $n -lt 600 ] || fail "rank 1 did not start its child"; done
kill -KILL "$(cat "$tmp/shpid")"
wait $pid; rc=$?
[ $rc -eq 137 ] || fail "a rank killed by SIGKILL: collx-run exited $rc, not 137"
child=$(cat "$tmp/child")
n=0; while alive "$child"; do
  sleep 0.05; n=$((n + 1)); [ $n -lt 100 ] || { kill -KILL "$child"; fail "the killed rank's child $child outlived collx-run"; }
done

# collx-run killed with SIGKILL (which it cannot forward): its ranks get SIGTERM.
"$run" -n 2 sh -c 'echo $$ > "$0/pid.$COLLX_RANK"; exec sleep 33.1' "$tmp" &
pid=$!
n=0; while [ ! -s "$tmp/pid.0" ] || [ ! -s "$tmp/pid.1" ]; do sleep 0.05; n=$((n + 1)); [ $n -lt 600 ] || fail "ranks did not start"; done
kill -KILL $pid
wait $pid 2>/dev/null
sleep 0.5
for r in 0 1; do
  p=$(cat "$tmp/pid.$r")
  # Gone, or a zombie that its new parent (init, or nothing in a container) has not reaped yet.
  state=$(sed -n 's/^State:[[:space:]]*\([A-Z]\).*/\1/p' "/proc/$p/status" 2>/dev/null)
  if [ -n "$state" ] && [ "$state" != Z ]; then kill "$p"; fail "rank $r (pid $p) outlived collx-run killed with SIGKILL"; fi
done
rm -rf "$tmp"

# A rank that fails while the job starts: rank 0 made the job's segment and waits for rank 1, which
# exits; collx-run stops rank 0, and removes the segment it leaves. Also for a job id that the
# segment's name carries cleaned (clitest_PID-<hash>).
if [ -n "$perf" ]; then
  for job in "clitest-$$" "clitest/$$"; do
    segs="/dev/shm/collx-$(id -u)-clitest-$$ /dev/shm/collx-$(id -u)-clitest_$$-*"  # as given; cleaned + hash
    # Rank 1 fails once rank 0's segment is past its first page (rank 0 has signed it as its creator).
    COLLX_JOB_ID=$job "$run" -n 2 sh -c 'if [ $COLLX_RANK = 1 ]; then n=0
        while size=$(stat -c %s $1 2>/dev/null | head -n 1); [ "${size:-0}" -le 8192 ] && [ $n -lt 600 ]; do sleep 0.05; n=$((n + 1)); done
        [ $n -lt 600 ] || exit 4; exit 3; fi; exec "$0" allreduce -b 8 -e 8 -n 1 -w 0' "$perf" "$segs" 2>/dev/null; rc=$?
    [ $rc -eq 3 ] || fail "job $job: a rank failing at start-up: exited $rc, not 3 (4: rank 0's segment never appeared)"
    left=$(ls $segs 2>/dev/null || true)
    if [ -n "$left" ]; then rm -f $left; fail "job $job: the job's segment $left was left behind"; fi
  done
fi

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
