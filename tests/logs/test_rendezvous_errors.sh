#!/usr/bin/env bash
# What a rank hears when a launch goes wrong at the rendezvous (HORA_ROOT), one case per call:
#   duplicate  a process of a second job on the same address and secret, as a rank that has
#              joined already or with another size, is turned away naming the rank and the
#              process that holds it (or both sizes); the job in progress completes exactly
#   settings   HORA_CHUNK_BYTES differs across ranks: every rank fails with the same text,
#              naming the setting, the ranks (host, pid) and their values
#   missing    a rank never comes: the error every rank gets names it
#   test_rendezvous_errors.sh CASE ALLREDUCE_PERF
# The ranks are sequenced through their logs, never by sleeping; timeouts only bound a hang.
set -u
case_=$1 perf=$2
out=$(mktemp -d)
pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done; rm -rf "$out"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
secret=$(head -c32 /dev/urandom | od -An -tx1 | tr -d ' \n')
port=$("$(dirname "$0")/../free_port.sh")
host=$(hostname)

# start NAME RANK SIZE [VAR=VALUE...]: one rank in the background, its output in $out/NAME;
# its pid (the rank's own: the command is exec'd) in pid_NAME.
start() {
  local name=$1 rank=$2 size=$3
  shift 3
  env HORA_ROOT=127.0.0.1:$port HORA_SECRET=$secret HORA_RANK=$rank HORA_SIZE=$size HORA_TIMEOUT_MS=${TIMEOUT_MS:-60000} "$@" \
    "$perf" -b 8 -e 64K -f 8 -n 2 -w 1 -c 1 >"$out/$name" 2>&1 &
  pids+=($!)
  printf -v "pid_$name" '%s' $!
}

# Waits (a minute at most, to bound a hang) until FILE holds N lines matching PATTERN.
await() {
  local file=$1 pattern=$2 n=$3
  for _ in $(seq 6000); do
    [ "$(grep -c -- "$pattern" "$file")" -ge "$n" ] && return 0
    sleep 0.01
  done
  fail "waited a minute for $n lines of '$pattern' in $file: $(tail -3 "$file")"
}

case $case_ in
duplicate)
  # Job A of 3 ranks: ranks 0 and 1 join, rank 2 comes only after the strays were turned away.
  start a0 0 3 HORA_DEBUG=TRACE HORA_DEBUG_SUBSYS=BOOTSTRAP
  start a1 1 3
  await "$out/a0" 'TRACE BOOTSTRAP rank [01] (.*) joined from' 2
  # A stray rank 1 of a second job: turned away, naming rank 1 and the process holding it.
  start dup 1 3
  wait "$pid_dup" && fail "a second rank 1 joined the job: $(tail -3 "$out/dup")"
  grep -qF "rank 1 ($host, pid $pid_dup) cannot join the rendezvous at 127.0.0.1:$port: rank 1 ($host, pid $pid_a1) has joined it already" "$out/dup" ||
    fail "the second rank 1's error does not name the rank and its holder: $(tail -3 "$out/dup")"
  # A stray of a job of another size: turned away, naming both sizes.
  start size 2 4
  wait "$pid_size" && fail "a rank of a job of 4 joined a job of 3: $(tail -3 "$out/size")"
  grep -qF "rank 2 ($host, pid $pid_size) cannot join the rendezvous at 127.0.0.1:$port: it was started as one of 4 ranks, but the job there has 3 ranks" "$out/size" ||
    fail "the stray of another size does not name both sizes: $(tail -3 "$out/size")"
  await "$out/a0" 'WARN BOOTSTRAP turned away' 2
  # Job A goes on: its rank 2 joins, and every rank completes exactly.
  start a2 2 3
  for r in 0 1 2; do
    p=pid_a$r
    wait "${!p}" || fail "job A's rank $r failed after the strays were turned away: $(tail -3 "$out/a$r")"
  done
  grep -q 'Out of bounds values : 0 OK' "$out/a0" || fail "job A's results are wrong: $(tail -3 "$out/a0")"
  ;;
settings)
  # Rank 2 differs from ranks 0 and 1; every rank names rank 0's value and rank 2's.
  start s0 0 3 HORA_CHUNK_BYTES=524288
  start s1 1 3 HORA_CHUNK_BYTES=524288
  start s2 2 3 HORA_CHUNK_BYTES=1048576
  want="HORA_CHUNK_BYTES differs across ranks: rank 0 ($host, pid $pid_s0) has 524288, rank 2 ($host, pid $pid_s2) has 1048576"
  for r in 0 1 2; do
    p=pid_s$r
    wait "${!p}" && fail "rank $r started with differing HORA_CHUNK_BYTES"
    grep -F "horaCommInitFromEnv failed" "$out/s$r" | grep -qF ": $want" ||
      fail "rank $r does not say: $want; it says: $(tail -2 "$out/s$r")"
    grep -F "horaCommInitFromEnv failed" "$out/s$r" | grep -qF "lost the rendezvous" && fail "rank $r says it lost the rendezvous"
  done
  # The same text on every rank, word for word.
  for r in 0 1 2; do grep -F "horaCommInitFromEnv failed" "$out/s$r" | sed 's/.*horaCommInitFromEnv failed: //'; done | sort -u >"$out/texts"
  [ "$(wc -l <"$out/texts")" -eq 1 ] || fail "the ranks' errors differ: $(cat "$out/texts")"
  ;;
missing)
  # A job of 3 where rank 2 never comes: both ranks' errors name rank 2 as the one missing,
  # whether the rendezvous gives up first (the same timeout everywhere) or a rank does (rank 1's
  # shorter timeout: the rendezvous answers its giving up with what it was waiting for).
  # Either way the result is horaTimeout.
  timeout_text='timed out waiting for a peer'
  for t1 in 3000 1500; do
    port=$("$(dirname "$0")/../free_port.sh")
    TIMEOUT_MS=3000 start m0 0 3
    TIMEOUT_MS=$t1 start m1 1 3
    for r in 0 1; do
      p=pid_m$r
      wait "${!p}" && fail "rank $r completed a job whose rank 2 never came"
      grep -F "horaCommInitFromEnv failed" "$out/m$r" | grep -qF "waiting for rank 2 to join the rendezvous at 127.0.0.1:$port (2 of 3 joined)" ||
        fail "rank $r's error does not name rank 2 as missing (rank 1's timeout $t1 ms): $(tail -2 "$out/m$r")"
      grep -q "horaCommInitFromEnv failed: $timeout_text:" "$out/m$r" ||
        fail "rank $r's error is not horaTimeout's (rank 1's timeout $t1 ms): $(tail -2 "$out/m$r")"
    done
  done
  # Rank 2 started with another size (a launcher's mistake, not a stray): it is turned away at
  # once, and the job's timeout names it beside the rank missing.
  port=$("$(dirname "$0")/../free_port.sh")
  TIMEOUT_MS=3000 start w0 0 3
  TIMEOUT_MS=3000 start w1 1 3
  TIMEOUT_MS=3000 start w2 2 4
  wait "$pid_w2" && fail "a rank of size 4 joined a job of 3"
  for r in 0 1; do
    p=pid_w$r
    wait "${!p}" && fail "rank $r completed a job whose rank 2 was turned away"
    grep -F "horaCommInitFromEnv failed" "$out/w$r" | grep -qF "waiting for rank 2 to join the rendezvous at 127.0.0.1:$port (2 of 3 joined; turned away: rank 2 ($host, pid $pid_w2) cannot join" ||
      fail "rank $r's timeout does not name the rank 2 turned away: $(tail -2 "$out/w$r")"
  done
  ;;
*) fail "unknown case $case_" ;;
esac
echo "ok"
