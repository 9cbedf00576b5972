#!/usr/bin/env bash
# What a rank hears when a launch goes wrong at the rendezvous (HORA_ROOT), one case per call:
#   settings   HORA_CHUNK_BYTES differs across ranks: every rank fails with the same text,
#              naming the setting, the ranks (host, pid) and their values
#   test_rendezvous_errors.sh CASE ALLREDUCE_PERF
# The ranks are sequenced through their logs, never by sleeping; timeouts only bound a hang.
set -u
case_=$1 perf=$2
out=$(mktemp -d)
pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done; rm -rf "$out"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
secret=$(head -c32 /dev/urandom | od -An -tx1 | tr -d ' \n')
port=$((30000 + RANDOM % 20000))
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
*) fail "unknown case $case_" ;;
esac
echo "ok"
