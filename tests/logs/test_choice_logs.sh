#!/usr/bin/env bash
# The planner explains itself: at HORA_DEBUG=INFO an AllReduce logs its choice with the
# predictions behind it, once per size class; at TRACE every call logs its algorithm; a forced
# algorithm that cannot run a call fails it, saying why.
#   test_choice_logs.sh HORA_RUN ALLREDUCE_PERF
set -u
run=$1 perf=$2
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

# INFO, shared memory: one explanation for the size, naming the winner and the others.
HORA_DEBUG=INFO HORA_DEBUG_SUBSYS=COLL "$run" -n 2 "$perf" -b 1K -e 1K -n 20 -w 2 >"$out/info" 2>&1 || fail "INFO run: $(tail -5 "$out/info")"
grep -q 'hora INFO COLL AllReduce 1 KiB float, 2 ranks on 1 host: chose flat (predicted [0-9.]* us; .*rd [0-9.]* us' "$out/info" ||
  fail "no explained choice at INFO: $(grep -c hora "$out/info") log lines"
n=$(grep -c 'INFO COLL AllReduce 1 KiB' "$out/info")
[ "$n" -eq 2 ] || fail "expected one explanation per rank, got $n"

# TRACE: every call, with its algorithm (22 calls per rank for -n 20 -w 2, out of place and in place: 44).
HORA_DEBUG=TRACE HORA_DEBUG_SUBSYS=COLL "$run" -n 2 "$perf" -b 1K -e 1K -n 20 -w 2 >"$out/trace" 2>&1 || fail "TRACE run"
n=$(grep -c '\[0\] hora TRACE COLL call #[0-9]*.*AllReduce(count 256, float, sum) by flat' "$out/trace")
[ "$n" -ge 44 ] || fail "expected a TRACE line for each of rank 0's calls, got $n"

# Over TCP the planner takes recursive doubling for small buffers.
HORA_TRANSPORTS=tcp HORA_DEBUG=INFO HORA_DEBUG_SUBSYS=COLL "$run" -n 2 "$perf" -b 8 -e 8 -n 5 -w 1 >"$out/tcp" 2>&1 || fail "TCP run"
grep -q 'AllReduce 8 B float, 2 ranks on 1 host: chose rd (predicted' "$out/tcp" || fail "no rd over TCP: $(grep INFO "$out/tcp" | head -3)"

# A forced algorithm that cannot run the call: an error that says why, on every rank.
HORA_TRANSPORTS=tcp HORA_ALGO=allreduce:flat "$run" -n 2 "$perf" -b 8 -e 8 -n 1 -w 0 >"$out/forced" 2>&1 && fail "forced flat over TCP did not fail"
grep -q 'HORA_ALGO forces flat for AllReduce, which cannot run .* shared stage' "$out/forced" ||
  fail "the forced error does not say why: $(tail -3 "$out/forced")"
# The hierarchical algorithm on one host: every rank's error names the reason and what could run
# instead. The ranks start by themselves (hora-run would stop the second once the first exits).
secret=$(head -c32 /dev/urandom | od -An -tx1 | tr -d ' \n')
port=$("$(dirname "$0")/../free_port.sh")
for r in 0 1; do
  HORA_ALGO=allreduce:hier HORA_ROOT=127.0.0.1:$port HORA_SECRET=$secret HORA_RANK=$r HORA_SIZE=2 HORA_TIMEOUT_MS=60000 \
    timeout 120 "$perf" -b 1M -e 1M -n 1 -w 0 >"$out/hier$r" 2>&1 &
done
for r in 0 1; do wait -n && fail "forced hier on one host did not fail on some rank"; done
for r in 0 1; do
  grep -q "rank $r: .*HORA_ALGO forces hier for AllReduce, which cannot run .*every rank is on one host (what could: .*ring" "$out/hier$r" ||
    fail "rank $r's forced hier error does not say why and what could: $(tail -3 "$out/hier$r")"
done
echo "ok"
