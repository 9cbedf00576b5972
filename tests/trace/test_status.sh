#!/usr/bin/env bash
# hora-run --status on a running job, hora-run's report on SIGUSR1 and on --timeout, and
# hora-inspect run as a program. Usage: test_status.sh HORA_RUN HORA_INSPECT TRACE_RANK CASE
#   status   4 ranks: rank 3 sleeps in its own code while 0-2 wait in their fourth AllReduce;
#            --status (by pid, and as the only job) must say so, as must hora-inspect of the
#            dumps and hora-run on SIGUSR1; released, the job exits 0 and its job file is gone.
#   timeout  2 ranks, rank 1 never released: --timeout stops the job with the report on stderr.
# Nothing depends on timing: the script waits for the ranks' ready files, and asks --status again
# until ranks 0-2 are seen blocked (bounded waits only stop a broken build from hanging).
set -u
HR=${1:?usage}
INSPECT=${2:?usage}
RANK=${3:?usage}
CASE=${4:?usage}

WORK=$(mktemp -d "${TMPDIR:-/tmp}/hora_status_test.XXXXXX")
HR_PID=
cleanup() {
  [ -n "$HR_PID" ] && kill -KILL "$HR_PID" 2>/dev/null
  rm -rf "$WORK"
}
trap cleanup EXIT
fail() {
  echo "FAIL [$CASE]: $*" >&2
  for f in "$WORK"/*.txt "$WORK"/err "$WORK"/out; do
    [ -f "$f" ] && { echo "--- $(basename "$f"):" >&2; head -n 40 "$f" >&2; }
  done
  exit 1
}
expect() {  # expect FILE REGEX
  grep -qE -- "$2" "$1" || fail "no line of $(basename "$1") matches '$2'"
}
wait_for() {  # wait_for SECONDS FILE...
  local s=$1 f ok
  shift
  for ((i = 0; i < s * 10; ++i)); do
    ok=1
    for f in "$@"; do [ -e "$f" ] || ok=0; done
    [ $ok = 1 ] && return 0
    sleep 0.1
  done
  return 1
}

# The job directory of this test's own (so that other jobs of this user are not "the only job").
export XDG_RUNTIME_DIR="$WORK/run"
mkdir -p "$XDG_RUNTIME_DIR" "$WORK/dumps"
export HORA_DUMP_DIR="$WORK/dumps"
mkfifo "$WORK/release"

case "$CASE" in
status)
  "$HR" -n 4 --timeout 300 "$RANK" "$WORK" >"$WORK/out" 2>"$WORK/err" &
  HR_PID=$!
  wait_for 120 "$WORK"/ready.{0,1,2,3} || fail "the ranks never got ready"
  ls "$XDG_RUNTIME_DIR"/hora-run/"$HR_PID".job >/dev/null || fail "no job file"
  seen=0
  for ((i = 0; i < 120; ++i)); do
    "$HR" --status "$HR_PID" >"$WORK/status.txt" 2>"$WORK/status.err" || fail "--status $HR_PID failed"
    if grep -qE '^  AllReduce #4 .*: ranks 0-2 wait at step [0-9]+ for rank 3' "$WORK/status.txt"; then seen=1; break; fi
    sleep 0.5
  done
  [ $seen = 1 ] || fail "--status never saw ranks 0-2 waiting for rank 3"
  expect "$WORK/status.txt" '^communicator [0-9a-f]{16}: 4 ranks; dumps of ranks 0-3'
  expect "$WORK/status.txt" '^  rank 3 last finished #3 and is in no call \(pid [0-9]+, state (S \(sleeping\)|R \(running\))\)$'
  expect "$WORK/status.txt" '^  last completed: #3 on ranks 0-3$'
  # The only job: found without its pid; and as JSON.
  "$HR" --status --json >"$WORK/status-json.txt" 2>"$WORK/status.err" || fail "--status --json failed"
  expect "$WORK/status-json.txt" '"nranks": 4'
  if command -v python3 >/dev/null; then
    python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); r=d["communicators"][0]["ranks"]; assert r[3]["current"] is None and r[0]["current"]["wait"]["rank"] == 3, r' \
      "$WORK/status-json.txt" || fail "--status --json is not the expected JSON"
  fi
  # hora-inspect, the program, over the dumps --status asked for.
  "$INSPECT" "$WORK/dumps" >"$WORK/inspect.txt" || fail "hora-inspect failed"
  expect "$WORK/inspect.txt" '^  rank 3 last finished #3 and is in no call'
  "$INSPECT" >"$WORK/usage.txt" 2>&1 && fail "hora-inspect without a directory succeeded"
  # SIGUSR1 to hora-run: the report on its stderr.
  kill -USR1 "$HR_PID"
  for ((i = 0; i < 300; ++i)); do grep -q 'is in no call' "$WORK/err" && break; sleep 0.1; done
  expect "$WORK/err" "^hora-run: the ranks' calls, as hora-inspect reports them:$"
  expect "$WORK/err" '^  rank 3 last finished #3 and is in no call'
  : >"$WORK/release"
  wait "$HR_PID"
  rc=$?
  HR_PID=
  [ $rc = 0 ] || fail "the job exited with $rc"
  ls "$XDG_RUNTIME_DIR"/hora-run/*.job >/dev/null 2>&1 && fail "the job file is left over"
  "$HR" --status >"$WORK/none.txt" 2>&1 && fail "--status without a job succeeded"
  expect "$WORK/none.txt" '^hora-run: --status: no running job of hora-run found in '
  ;;
timeout)
  "$HR" -n 2 --timeout 20 "$RANK" "$WORK" >"$WORK/out" 2>"$WORK/err"
  rc=$?
  [ $rc = 124 ] || fail "hora-run exited with $rc, not 124"
  expect "$WORK/err" '^hora-run: timeout after 20 s; stopping all ranks$'
  expect "$WORK/err" "^hora-run: the ranks' calls, as hora-inspect reports them:$"
  expect "$WORK/err" '^  AllReduce #4 \(2 float, sum.*\): rank 0 waits at step [0-9]+ for rank 1'
  # The SIGUSR1 that asks rank 1 for its dump runs its handler on the thread asleep in open(), which
  # then may still be runnable (R) when its state is read on a loaded machine (once in CI).
  expect "$WORK/err" '^  rank 1 last finished #3 and is in no call \(pid [0-9]+, state (S \(sleeping\)|R \(running\))\)$'
  ;;
*) fail "unknown case" ;;
esac
echo "ok [$CASE]"
