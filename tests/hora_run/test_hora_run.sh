#!/usr/bin/env bash
# Tests of hora-run. Usage: test_hora_run.sh HORA_RUN RANK_HELPER [CASE...]
# With no CASE, runs them all. tools/meson.build declares one meson test per case.
#
# Nothing here depends on timing: ranks that must be ready before a signal comes say so
# with a file (DIR/ready.<rank>) and the script waits for it; the waits and hora-run's
# --timeout 120 are there only so that a broken hora-run fails instead of hanging.
set -u

HR=${1:?usage: test_hora_run.sh HORA_RUN RANK_HELPER [CASE...]}
HELPER=${2:?usage: test_hora_run.sh HORA_RUN RANK_HELPER [CASE...]}
shift 2

WORK=$(mktemp -d "${TMPDIR:-/tmp}/hora_run_test.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
# Every process of a test run carries this in its environment, so that leftovers can be
# found (leftovers) without knowing their pids.
TOKEN="hora_run_test_$$_$RANDOM"
GUARD=(--timeout 120)
# hora-run claims the CPUs it binds to in a file that every job of the host shares; the tests'
# jobs claim in one of their own, so that other jobs on this host (other test runs) cannot take
# the CPUs the cases expect.
export HORA_RUN_CPU_CLAIMS="$WORK/cpu_claims"

fail() {
  echo "FAIL [$CASE]: $*" >&2
  for f in "$WORK"/out "$WORK"/err "$WORK"/*.out "$WORK"/*.err; do
    [ -f "$f" ] && { echo "--- $(basename "$f") (first 20 lines):" >&2; head -n 20 "$f" >&2; }
  done
  # Jobs of job_bg still running would wait out their ranks' minute; their ranks die with them.
  local pid
  for pid in "${JOBS[@]}"; do kill -KILL "$pid" 2>/dev/null; done
  exit 1
}

# hr ARGS...: runs hora-run in the foreground; output in $WORK/out and $WORK/err, status in $RC.
hr() {
  env HR_TEST_TOKEN="$TOKEN" "$HR" "$@" >"$WORK/out" 2>"$WORK/err"
  RC=$?
}

# hr_bg ARGS...: the same in the background; its pid in $HR_PID. Collect with hr_wait.
hr_bg() {
  env HR_TEST_TOKEN="$TOKEN" "$HR" "$@" >"$WORK/out" 2>"$WORK/err" &
  HR_PID=$!
}
hr_wait() {
  wait "$HR_PID"
  RC=$?
}

expect_rc() {
  [ "$RC" -eq "$1" ] || fail "hora-run exited with $RC, expected $1"
}

expect_grep() {  # expect_grep FILE REGEX
  grep -qE -- "$2" "$WORK/$1" || fail "no line of $1 matches '$2'"
}

# wait_files DIR NAME...: waits until all the files exist.
wait_files() {
  local dir=$1 name tries
  shift
  for name in "$@"; do
    tries=0
    until [ -e "$dir/$name" ]; do
      tries=$((tries + 1))
      [ $tries -le 6000 ] || fail "$dir/$name did not appear"
      sleep 0.01
    done
  done
}

ready_names() {  # ready_names N: ready.0 .. ready.N-1
  local r
  for ((r = 0; r < $1; r++)); do echo "ready.$r"; done
}

# Pids of live (not zombie) processes that carry this run's token.
leftovers() {
  local p state
  for p in /proc/[0-9]*; do
    tr '\0' '\n' 2>/dev/null <"$p/environ" | grep -qx "HR_TEST_TOKEN=$TOKEN" || continue
    state=$(sed -e 's/^.*) //' 2>/dev/null <"$p/stat" | cut -c1)
    [ -n "$state" ] && [ "$state" != Z ] && echo "${p#/proc/}"
  done
}

# Killed processes take a moment to go; waits up to a minute for all of them.
expect_nothing_left() {
  local tries=0 left
  while left=$(leftovers) && [ -n "$left" ]; do
    tries=$((tries + 1))
    [ $tries -le 600 ] || fail "processes still running: $left"
    sleep 0.1
  done
}

expect_signal_recorded() {  # expect_signal_recorded DIR NAME SIGNAL
  [ -f "$1/$2" ] || fail "$2 recorded no signal"
  grep -qx "$3" "$1/$2" || fail "$2 recorded '$(tr '\n' ' ' <"$1/$2")', expected $3"
}

new_dir() {
  local dir="$WORK/$1"
  rm -rf "$dir" && mkdir -p "$dir" && echo "$dir"
}

# ---- cases ---------------------------------------------------------------------------

case_env() {
  # Values already in the environment must be replaced, not kept.
  HORA_RANK=99 HORA_ID=bogus HORA_SIZE=7 hr -n 4 "${GUARD[@]}" "$HELPER" env
  expect_rc 0
  [ "$(wc -l <"$WORK/out")" -eq 4 ] || fail "expected 4 lines"
  local r line id ids=()
  for r in 0 1 2 3; do
    line=$(grep -E "^\[$r\] " "$WORK/out") || fail "no line from rank $r"
    [[ $line =~ ^\[$r\]\ rank=$r\ size=4\ local_rank=$r\ local_size=4\ id=([0-9a-f]+)$ ]] ||
      fail "bad line: $line"
    id=${BASH_REMATCH[1]}
    [ ${#id} -eq 256 ] || fail "HORA_ID of rank $r has ${#id} characters, not 256"
    ids+=("$id")
  done
  [ "$(printf '%s\n' "${ids[@]}" | sort -u | wc -l)" -eq 1 ] || fail "ranks got different ids"
  # A new job gets a new id.
  hr -n 1 "${GUARD[@]}" "$HELPER" env
  expect_rc 0
  grep -q "id=${ids[0]}" "$WORK/out" && fail "two jobs got the same id"
  return 0
}

case_width() {
  # With 11 ranks the prefix is padded to two digits: "[ 3] ", "[10] ".
  hr -n 11 "${GUARD[@]}" "$HELPER" env
  expect_rc 0
  [ "$(wc -l <"$WORK/out")" -eq 11 ] || fail "expected 11 lines"
  local r
  for r in 0 1 2 3 4 5 6 7 8 9 10; do
    grep -qE "^\[$(printf '%2d' "$r")\] rank=$r size=11 " "$WORK/out" || fail "no padded line of rank $r"
  done
  hr -n 1 "${GUARD[@]}" "$HELPER" env
  grep -qE '^\[0\] rank=0 size=1 ' "$WORK/out" || fail "bad prefix with one rank"
}

case_args() {
  # Options end at PROGRAM; what follows goes to the rank unchanged. -np and -- work.
  hr -np 2 "${GUARD[@]}" -- "$HELPER" args -n 5 --no-prefix "two words"
  expect_rc 0
  [ "$(grep -c '^\[0\] arg=' "$WORK/out")" -eq 4 ] || fail "rank 0 did not get 4 arguments"
  grep -qx '\[1\] arg=-n' "$WORK/out" || fail "missing -n"
  grep -qx '\[1\] arg=5' "$WORK/out" || fail "missing 5"
  grep -qx '\[1\] arg=--no-prefix' "$WORK/out" || fail "missing --no-prefix"
  grep -qx '\[1\] arg=two words' "$WORK/out" || fail "missing 'two words'"
  hr -n2 --timeout=120 "$HELPER" args x
  expect_rc 0
  [ "$(grep -c 'arg=x' "$WORK/out")" -eq 2 ] || fail "-n2 --timeout=120 did not work"
  # PROGRAM is looked up in PATH.
  hr -n 3 "${GUARD[@]}" true
  expect_rc 0
  hr -n 3 "${GUARD[@]}" sh -c 'exit 0'
  expect_rc 0
}

# 4 ranks print 2000 long lines each to stdout and stderr at once, in writes that cut lines
# apart; every line hora-run writes must be one whole line of one rank, behind its prefix,
# and each rank's lines must all be there in order.
case_lines() {
  hr -n 4 "${GUARD[@]}" "$HELPER" spam 2000 300
  expect_rc 0
  local stream letters
  for stream in out err; do
    [ $stream = out ] && letters=abcd || letters=ABCD
    awk -v letters="$letters" '
      {
        if (!match($0, /^\[[0-3]\] r=[0-3] i=[0-9]+ [A-Za-z]+$/)) { print "malformed line " NR; bad = 1; exit }
        r = substr($0, 2, 1)
        split($0, f, " ")
        if (f[2] != "r=" r) { print "line " NR " of rank " r " says " f[2]; bad = 1; exit }
        i = substr(f[3], 3) + 0
        if (i != next_i[r] + 0) { print "rank " r " line " i " came where " next_i[r] + 0 " was due"; bad = 1; exit }
        next_i[r] = i + 1
        want = substr(letters, r + 1, 1)
        if (length(f[4]) != 300 || f[4] !~ ("^" want "+$")) { print "bad payload in line " NR; bad = 1; exit }
      }
      END {
        if (bad) exit 1
        for (r = 0; r < 4; r++) if (next_i[r] + 0 != 2000) { print "rank " r " has " next_i[r] + 0 " lines"; exit 1 }
      }' "$WORK/$stream" >"$WORK/awk" || fail "std$stream: $(cat "$WORK/awk")"
  done
}

case_partial() {
  hr -n 2 "${GUARD[@]}" "$HELPER" partial
  expect_rc 0
  local r
  for r in 0 1; do
    grep -qx "\[$r\] first line" "$WORK/out" || fail "rank $r: no first line"
    grep -qx "\[$r\] no newline at end" "$WORK/out" || fail "rank $r: partial stdout line not completed"
    grep -qx "\[$r\] err first" "$WORK/err" || fail "rank $r: no first stderr line"
    grep -qx "\[$r\] err no newline" "$WORK/err" || fail "rank $r: partial stderr line not completed"
  done
  [ "$(wc -l <"$WORK/out")" -eq 4 ] || fail "expected 4 stdout lines"
  [ "$(tail -c 1 "$WORK/out" | od -An -c | tr -d ' ')" = '\n' ] || fail "stdout does not end in a newline"
}

case_noprefix() {
  hr -n 3 --no-prefix "${GUARD[@]}" "$HELPER" partial
  expect_rc 0
  [ "$(grep -cx 'first line' "$WORK/out")" -eq 3 ] || fail "expected 3 unprefixed first lines"
  [ "$(grep -cx 'no newline at end' "$WORK/out")" -eq 3 ] || fail "expected 3 completed partial lines"
  [ "$(grep -cx 'err no newline' "$WORK/err")" -eq 3 ] || fail "expected 3 completed stderr lines"
  [ "$(wc -l <"$WORK/out")" -eq 6 ] || fail "expected 6 stdout lines"
  hr --no-prefix -n 2 "${GUARD[@]}" "$HELPER" spam 500 200
  expect_rc 0
  [ "$(grep -cE '^r=[01] i=[0-9]+ [ab]{200}$' "$WORK/out")" -eq 1000 ] || fail "unprefixed lines were cut or mixed"
}

case_exitstatus() {
  # Rank 2 exits 3 once all are ready; the others sleep until SIGTERM.
  local dir
  dir=$(new_dir exitstatus)
  hr -n 4 "${GUARD[@]}" "$HELPER" sleeper "$dir" --exit-rank 2 3
  expect_rc 3
  expect_grep err '^hora-run: rank 2 \(pid [0-9]+\) exited with status 3; stopping the other ranks$'
  local r
  for r in 0 1 3; do expect_signal_recorded "$dir" "sig.$r" TERM; done
  [ -e "$dir/sig.2" ] && fail "rank 2 got a signal"
  expect_nothing_left
}

case_killed() {
  local dir
  dir=$(new_dir killed)
  hr -n 3 "${GUARD[@]}" "$HELPER" sleeper "$dir" --kill-rank 1
  expect_rc 137
  expect_grep err '^hora-run: rank 1 \(pid [0-9]+\) killed by signal 9 \(Killed\); stopping the other ranks$'
  expect_signal_recorded "$dir" sig.0 TERM
  expect_signal_recorded "$dir" sig.2 TERM
  expect_nothing_left
}

# forwarded SIGNAL: SIGNAL sent to hora-run reaches every rank and its children.
forwarded() {
  local signal=$1 dir
  dir=$(new_dir "forward_$signal")
  hr_bg -n 3 "${GUARD[@]}" "$HELPER" sleeper "$dir" --grandchild
  wait_files "$dir" $(ready_names 3)
  kill -s "$signal" "$HR_PID"
  hr_wait
  local r
  for r in 0 1 2; do
    expect_signal_recorded "$dir" "sig.$r" "$signal"
    # The rank's own child is in its process group: it gets the signal too.
    wait_files "$dir" "sig.gc.$r"
    expect_signal_recorded "$dir" "sig.gc.$r" "$signal"
  done
  # The ranks died of the signal: that is hora-run's status too.
  [ "$signal" = TERM ] && expect_rc 143
  [ "$signal" = INT ] && expect_rc 130
  expect_nothing_left
}

case_sigterm() { forwarded TERM; }
case_sigint() { forwarded INT; }

case_escalate() {
  # Ranks that ignore the forwarded SIGTERM are killed by a second one.
  local dir
  dir=$(new_dir escalate)
  hr_bg -n 2 "${GUARD[@]}" "$HELPER" sleeper "$dir" --stubborn
  wait_files "$dir" $(ready_names 2)
  kill -TERM "$HR_PID"
  wait_files "$dir" sig.0 sig.1
  kill -TERM "$HR_PID"
  hr_wait
  expect_rc 137
  expect_nothing_left
}

case_grace() {
  # Rank 0 fails; the others ignore SIGTERM and are SIGKILLed after the grace period.
  local dir
  dir=$(new_dir grace)
  HORA_RUN_GRACE_S=0.2 hr -n 3 "${GUARD[@]}" "$HELPER" sleeper "$dir" --stubborn --exit-rank 0 5
  expect_rc 5
  expect_grep err '^hora-run: rank 0 \(pid [0-9]+\) exited with status 5; stopping the other ranks$'
  expect_nothing_left
}

case_timeout() {
  # Whenever the timeout comes (before or after the ranks are ready), nothing may be left.
  local dir
  dir=$(new_dir timeout)
  hr -n 3 --timeout 0.5 "$HELPER" sleeper "$dir" --grandchild
  expect_rc 124
  expect_grep err '^hora-run: timeout after 0.5 s; stopping all ranks$'
  expect_nothing_left
  dir=$(new_dir timeout_stubborn)
  HORA_RUN_GRACE_S=0.1 hr -n 2 --timeout 0.3 "$HELPER" sleeper "$dir" --stubborn --grandchild
  expect_rc 124
  expect_nothing_left
}

case_noexec() {
  hr -n 2 "${GUARD[@]}" "$WORK/no/such/program" x y
  expect_rc 127
  expect_grep err "^\[[01]\] hora-run: cannot execute $WORK/no/such/program: No such file or directory$"
  hr -n 1 "${GUARD[@]}" hora-run-test-no-such-program-in-path
  expect_rc 127
  expect_grep err '^\[0\] hora-run: cannot execute hora-run-test-no-such-program-in-path: No such file or directory$'
  printf 'not executable\n' >"$WORK/plain_file"
  chmod -x "$WORK/plain_file"
  hr -n 1 "${GUARD[@]}" "$WORK/plain_file"
  expect_rc 127
  expect_grep err 'cannot execute .*plain_file: Permission denied$'
  # One rank that cannot start stops the others, which then run nothing.
  local dir
  dir=$(new_dir noexec)
  hr -n 2 "${GUARD[@]}" sh -c 'if [ "$HORA_RANK" = 1 ]; then exec /nonexistent/x; fi; exec "$0" sleeper "$1"' "$HELPER" "$dir"
  expect_rc 127
  expect_nothing_left
}

case_usage() {
  local args
  while IFS= read -r args; do
    eval "hr $args"
    [ "$RC" -eq 2 ] || fail "'hora-run $args' exited with $RC, not 2"
    grep -q '^usage: hora-run' "$WORK/err" || fail "'hora-run $args' printed no usage"
    [ -s "$WORK/out" ] && fail "'hora-run $args' wrote to stdout"
  done <<'EOF'

true
-n 2
-n 2 --
-n 0 true
-n -1 true
-n 1025 true
-n abc true
-n 2x true
-n
--timeout 1 true
-n 2 --timeout 0 true
-n 2 --timeout -1 true
-n 2 --timeout abc true
-n 2 --timeout
-n 2 --bogus true
-x -n 2 true
-n 2 --bind socket true
-n 2 --bind
-n 2 --bind=numas true
EOF
  hr -n 1024 --help
  expect_rc 0
  grep -q '^usage: hora-run' "$WORK/out" || fail "--help printed no usage on stdout"
  hr -h
  expect_rc 0
}

case_fds() {
  # Started with nothing above fd 2, ranks must see no pipe above fd 2 (other ranks' pipe
  # ends, hora-run's signal pipe), and /dev/null as stdin.
  hr -n 4 "${GUARD[@]}" "$HELPER" fds
  expect_rc 0
  env HR_TEST_TOKEN="$TOKEN" "$HELPER" closefds "$HR" -n 4 "${GUARD[@]}" "$HELPER" fds >"$WORK/out" 2>"$WORK/err"
  RC=$?
  expect_rc 0
  [ "$(grep -c '^\[[0-3]\] stdin=/dev/null$' "$WORK/out")" -eq 4 ] || fail "stdin is not /dev/null"
  grep -q 'leaked' "$WORK/out" && fail "ranks inherited pipes: $(grep leaked "$WORK/out" | head -3)"
  return 0
}

case_bind() {
  # --bind core: every rank on one CPU of hora-run's, no two on one CPU while there are CPUs
  # enough (a core's first hyperthread before any core's second); --bind none: the ranks keep
  # hora-run's whole set.
  local mine n a b
  mine=$(grep '^Cpus_allowed_list' /proc/self/status | awk '{print $2}')
  n=3
  hr -n $n --bind core "${GUARD[@]}" sh -c 'grep ^Cpus_allowed_list /proc/self/status'
  expect_rc 0
  [ "$(grep -c 'Cpus_allowed_list:[[:space:]]*[0-9][0-9]*$' "$WORK/out")" -eq $n ] ||
    fail "--bind core left a rank on more than one CPU"
  if [ "$(nproc)" -ge 2 ]; then
    a=$(grep '^\[0\]' "$WORK/out" | awk '{print $NF}')
    b=$(grep '^\[1\]' "$WORK/out" | awk '{print $NF}')
    [ "$a" != "$b" ] || fail "ranks 0 and 1 share CPU $a"
  fi
  hr -n $n --bind none "${GUARD[@]}" sh -c 'grep ^Cpus_allowed_list /proc/self/status'
  expect_rc 0
  [ "$(grep -c "Cpus_allowed_list:[[:space:]]*$mine\$" "$WORK/out")" -eq $n ] ||
    fail "--bind none changed the ranks' CPUs (hora-run has $mine)"
}

# The CPUs of NUMA node $1 that this script may use, written as Cpus_allowed_list writes them
# ("0-1,4"); all of them when the system shows no such node.
node_cpus_allowed() {
  /usr/bin/python3 -c '
import os, sys
def expand(text):
    out = set()
    for part in text.strip().split(","):
        if part:
            lo, _, hi = part.partition("-")
            out.update(range(int(lo), int(hi or lo) + 1))
    return out
path = "/sys/devices/system/node/node%s/cpulist" % sys.argv[1]
mine = os.sched_getaffinity(0)
cpus = sorted(expand(open(path).read()) & mine if os.path.exists(path) else mine)
runs = []
for c in cpus:
    if runs and runs[-1][1] == c - 1:
        runs[-1][1] = c
    else:
        runs.append([c, c])
print(",".join(str(a) if a == b else "%d-%d" % (a, b) for a, b in runs))
' "$1"
}

case_bindnuma() {
  # --bind numa: rank r gets all of hora-run's CPUs on NUMA node r mod (nodes that have some);
  # on a machine of one node, every rank gets all of hora-run's CPUs.
  local d r node want got n=3
  local nodes=()
  for d in /sys/devices/system/node/node[0-9]*; do
    [ -d "$d" ] || continue
    [ -n "$(node_cpus_allowed "${d##*node}")" ] && nodes+=("${d##*node}")
  done
  [ ${#nodes[@]} -gt 0 ] || nodes=(0)
  hr -n $n --bind numa "${GUARD[@]}" sh -c 'grep ^Cpus_allowed_list /proc/self/status'
  expect_rc 0
  for ((r = 0; r < n; r++)); do
    node=${nodes[r % ${#nodes[@]}]}
    want=$(node_cpus_allowed "$node")
    got=$(grep "^\[$r\]" "$WORK/out" | awk '{print $NF}')
    [ "$got" = "$want" ] || fail "--bind numa gave rank $r CPUs '$got', not node $node's '$want'"
  done
  hr -n 2 --bind=numa "${GUARD[@]}" true
  expect_rc 0
}

# job_bg NAME ARGS...: hora-run in the background, output in $WORK/NAME.out and NAME.err, its
# pid in $JOB_PID (env and taskset exec hora-run: the pid is hora-run's) and in JOBS. Collect
# with job_wait. With JOB_CPUS set, hora-run runs confined to those CPUs (taskset -c).
JOBS=()
job_bg() {
  local name=$1 confine=()
  shift
  [ -n "${JOB_CPUS:-}" ] && confine=(taskset -c "$JOB_CPUS")
  "${confine[@]}" env HR_TEST_TOKEN="$TOKEN" "$HR" "$@" >"$WORK/$name.out" 2>"$WORK/$name.err" &
  JOB_PID=$!
  JOBS+=("$JOB_PID")
}
job_wait() {  # job_wait PID NAME: fails unless the job exited 0
  wait "$1"
  local rc=$?
  [ $rc -eq 0 ] || fail "job $2 exited with $rc: $(cat "$WORK/$2.err")"
}

# The CPUs rank R of a job in DIR reported (rank_helper affinity).
cpus_of() { cat "$1/cpus.$2"; }

# expect_apart FIRST SECOND FIRST_PID: of two 2-rank jobs (rank_helper affinity in $WORK/FIRST
# and $WORK/SECOND), FIRST bound each rank to a CPU of its own, and SECOND, which found FIRST's
# claim, bound each rank only to a CPU FIRST has not or, when it could not give each rank one of
# its own (fewer than 4 CPUs), runs unbound and says so, naming FIRST.
expect_apart() {
  local first=$WORK/$1 second=$WORK/$2 pid=$3 mine n r ra rb seen=""
  mine=$(grep '^Cpus_allowed_list' /proc/self/status | awk '{print $2}')
  n=$(nproc)
  for r in 0 1; do
    [[ $(cpus_of "$first" $r) =~ ^[0-9]+$ ]] || fail "job $1's rank $r is on CPUs '$(cpus_of "$first" $r)', not one CPU"
  done
  [ "$(cpus_of "$first" 0)" != "$(cpus_of "$first" 1)" ] || fail "job $1's ranks share CPU $(cpus_of "$first" 0)"
  grep -q 'taken' "$WORK/$1.err" && fail "job $1 found CPUs taken"
  ra=" $(cpus_of "$first" 0) $(cpus_of "$first" 1) "
  if [ "$n" -ge 4 ]; then
    grep -q 'unbound' "$WORK/$2.err" && fail "job $2 ran unbound with $n CPUs"
    for r in 0 1; do
      rb=$(cpus_of "$second" $r)
      [[ $rb =~ ^[0-9]+$ ]] || fail "job $2's rank $r is on CPUs '$rb', not one CPU"
      [[ $ra == *" $rb "* ]] && fail "job $2's rank $r is on CPU $rb, which job $1's ranks ($ra) have"
      [[ $seen == *" $rb "* ]] && fail "job $2's ranks share CPU $rb"
      seen+=" $rb "
    done
  else
    grep -qE "^hora-run: CPUs? [0-9,-]+ (is|are) taken by another Hora job \(pid $pid\)(, leaving [^;]*)?; running 2 ranks unbound\$" "$WORK/$2.err" ||
      fail "job $2 did not say it runs unbound because of job $1 (pid $pid)"
    for r in 0 1; do
      [ "$(cpus_of "$second" $r)" = "$mine" ] || fail "job $2's rank $r is on CPUs '$(cpus_of "$second" $r)', not unbound ($mine)"
    done
  fi
  return 0
}

# two_jobs beside|together: jobs a and b of 2 ranks each (rank_helper affinity); b starts once
# a's ranks have reported (beside), or at the same time (together: they claim one after the
# other, whichever comes first, so one gets its CPUs and the other what is left, not each half
# of what one needed). Checked by expect_apart; then both must exit 0.
two_jobs() {
  local pid_a pid_b
  if [ "$(nproc)" -lt 2 ]; then echo "# one CPU: nothing to share"; return 0; fi
  new_dir a >/dev/null && new_dir b >/dev/null
  job_bg a -n 2 "${GUARD[@]}" "$HELPER" affinity "$WORK/a"
  pid_a=$JOB_PID
  [ "$1" = beside ] && wait_files "$WORK/a" cpus.0 cpus.1
  job_bg b -n 2 "${GUARD[@]}" "$HELPER" affinity "$WORK/b"
  pid_b=$JOB_PID
  wait_files "$WORK/a" cpus.0 cpus.1
  wait_files "$WORK/b" cpus.0 cpus.1
  if [ "$1" = together ] && grep -q 'taken' "$WORK/a.err"; then
    expect_apart b a "$pid_b"
  else
    expect_apart a b "$pid_a"
  fi
  touch "$WORK/a/exit" "$WORK/b/exit"
  job_wait "$pid_a" a
  job_wait "$pid_b" b
}

case_beside() { two_jobs beside; }
case_together() { two_jobs together; }

# A job confined to CPU 1 (taskset) binds there and claims only CPU 1: a job beside it binds to
# another CPU, without a word about CPUs taken.
case_mask() {
  local pid_a pid_b b
  if [ "$(nproc)" -lt 2 ] || ! taskset -c 1 true 2>/dev/null; then
    echo "# CPU 1 is not ours: nothing to confine to"; return 0
  fi
  new_dir a >/dev/null && new_dir b >/dev/null
  JOB_CPUS=1 job_bg a -n 1 "${GUARD[@]}" "$HELPER" affinity "$WORK/a"
  pid_a=$JOB_PID
  wait_files "$WORK/a" cpus.0
  [ "$(cpus_of "$WORK/a" 0)" = 1 ] || fail "the confined job's rank is on CPUs '$(cpus_of "$WORK/a" 0)', not 1"
  job_bg b -n 1 "${GUARD[@]}" "$HELPER" affinity "$WORK/b"
  pid_b=$JOB_PID
  wait_files "$WORK/b" cpus.0
  b=$(cpus_of "$WORK/b" 0)
  [[ $b =~ ^[0-9]+$ ]] || fail "the job beside it is on CPUs '$b', not one CPU: $(cat "$WORK/b.err")"
  [ "$b" != 1 ] || fail "the job beside it is on CPU 1 too"
  grep -q 'taken' "$WORK/b.err" && fail "the job beside it found CPUs taken: $(cat "$WORK/b.err")"
  touch "$WORK/a/exit" "$WORK/b/exit"
  job_wait "$pid_a" a
  job_wait "$pid_b" b
}

# The claim dies with its job: after hora-run is SIGKILLed, a new job gets the CPUs it had.
case_reclaim() {
  local a c r pid_a pid_c
  if [ "$(nproc)" -lt 2 ]; then echo "# one CPU: nothing to claim"; return 0; fi
  a=$(new_dir reclaim_a) c=$(new_dir reclaim_c)
  job_bg a -n 2 "${GUARD[@]}" "$HELPER" affinity "$a"
  pid_a=$JOB_PID
  wait_files "$a" cpus.0 cpus.1
  kill -KILL "$pid_a"
  wait "$pid_a" 2>/dev/null  # gone, its files closed: the kernel has dropped its locks
  job_bg c -n 2 "${GUARD[@]}" "$HELPER" affinity "$c"
  pid_c=$JOB_PID
  wait_files "$c" cpus.0 cpus.1
  touch "$c/exit"
  job_wait "$pid_c" c
  grep -q 'taken\|unbound' "$WORK/c.err" && fail "the new job still found CPUs taken: $(cat "$WORK/c.err")"
  for r in 0 1; do
    [ "$(cpus_of "$c" $r)" = "$(cpus_of "$a" $r)" ] ||
      fail "the new job's rank $r is on CPUs '$(cpus_of "$c" $r)', not the killed job's '$(cpus_of "$a" $r)'"
  done
  expect_nothing_left
}

# The claim file: made readable and writable by every user whatever the umask; a file that
# cannot be made leaves the ranks unbound with a message; HORA_RUN_BIND=none and --bind none
# claim nothing.
case_claimfile() {
  local dir mine
  mine=$(grep '^Cpus_allowed_list' /proc/self/status | awk '{print $2}')
  dir=$(new_dir claimfile)
  (umask 077 && HORA_RUN_CPU_CLAIMS="$dir/cpus" hr -n 1 --bind core "${GUARD[@]}" true)
  [ "$(stat -c %a "$dir/cpus")" = 666 ] || fail "the claim file has mode $(stat -c %a "$dir/cpus"), not 666"
  [ "$(head -c 16 "$dir/cpus")" = "hora-run claims" ] || fail "the claim file has no header"
  HORA_RUN_CPU_CLAIMS="$dir/no/such/dir/cpus" hr -n 2 --bind core "${GUARD[@]}" sh -c 'grep ^Cpus_allowed_list /proc/self/status'
  expect_rc 0
  expect_grep err "^hora-run: cannot claim CPUs: .*: No such file or directory; running 2 ranks unbound\$"
  [ "$(grep -c "Cpus_allowed_list:[[:space:]]*$mine\$" "$WORK/out")" -eq 2 ] || fail "the ranks were bound"
  HORA_RUN_BIND=none HORA_RUN_CPU_CLAIMS="$dir/none" hr -n 2 "${GUARD[@]}" sh -c 'grep ^Cpus_allowed_list /proc/self/status'
  expect_rc 0
  [ "$(grep -c "Cpus_allowed_list:[[:space:]]*$mine\$" "$WORK/out")" -eq 2 ] || fail "HORA_RUN_BIND=none bound the ranks"
  [ -e "$dir/none" ] && fail "an unbound job made a claim file"
  # HORA_DEBUG=INFO: where the ranks went.
  HORA_DEBUG=INFO HORA_RUN_CPU_CLAIMS="$dir/cpus" hr -n 2 --bind core "${GUARD[@]}" true
  expect_rc 0
  expect_grep err "^hora-run: rank 0 on CPU [0-9]+, rank 1 on CPU [0-9]+ \(claimed in $dir/cpus\)\$"
  HORA_RUN_BIND=bogus hr -n 1 "${GUARD[@]}" true
  expect_rc 0
  expect_grep err "^hora-run: ignoring HORA_RUN_BIND='bogus': expected core, numa or none\$"
}

ALL_CASES=(env width args lines partial noprefix exitstatus killed sigterm sigint escalate grace
  timeout noexec usage fds bind bindnuma beside together mask reclaim claimfile)

[ $# -gt 0 ] || set -- "${ALL_CASES[@]}"
for CASE in "$@"; do
  declare -F "case_$CASE" >/dev/null || { echo "unknown case $CASE" >&2; exit 2; }
  "case_$CASE"
  echo "ok - $CASE"
done
