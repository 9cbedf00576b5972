#!/usr/bin/env bash
# Strangers cannot keep a job from starting:
#   unix-other: another local user fills rank 0's shared-memory socket (found in /proc/net/unix)
#     with idle connections while rank 0 waits for rank 1 at the rendezvous;
#   unix-same:  the same, from this user (who passes the uid check but never says hello), and
#     without end: a connection closed, another opened, so the backlog never drains;
#   emfile:     the rendezvous rank 0 hosts gets 1,100 idle TCP connections while rank 0 may
#     open 1,024 descriptors (more than it can hold: it must drop them, not die of EMFILE).
# In each, rank 1 then starts, and the job must form and all-reduce exactly.
#   test_flood.sh CASE LAUNCH_RANK FLOOD_PY
case_=$1 rank_prog=$2 flood=$3
. "$(dirname "$0")/../launch/lib.sh" || exit 1
port=$(free_port)
run_rank() {  # run_rank R [ulimit -n]
  ( [ -n "${2:-}" ] && ulimit -n "$2"
    exec env -i PATH="$PATH" HORA_DEBUG=WARN HORA_TIMEOUT_MS=60000 HORA_ROOT=127.0.0.1:$port HORA_SECRET="$secret" \
      HORA_RANK=$1 HORA_SIZE=2 timeout 120 "$rank_prog" ) >"$out/rank$1" 2>&1
}
case $case_ in
  unix-other|unix-same)
    run_rank 0 &
    r0=$!
    pids+=($r0)
    if [ "$case_" = unix-other ]; then
      id -u nobody >/dev/null 2>&1 || { echo "SKIP: no user 'nobody'"; exit 77; }
      [ "$(id -u)" -eq 0 ] || { echo "SKIP: acting as another user needs root"; exit 77; }
      /usr/bin/python3 "$flood" unix "$r0" 100 "$out/ready" "$(id -u nobody)" >"$out/flood" 2>&1 &
    else
      # Connecting again and again: the backlog stays full however fast rank 0 drains it.
      /usr/bin/python3 "$flood" unix-keep "$r0" 200 "$out/ready" >"$out/flood" 2>&1 &
    fi
    pids+=($!)
    ;;
  emfile)
    run_rank 0 1024 &
    r0=$!
    pids+=($r0)
    # The rendezvous is up once rank 0 listens on its port.
    for _ in $(seq 300); do (exec 3<>/dev/tcp/127.0.0.1/$port) 2>/dev/null && break; sleep 0.05; done
    /usr/bin/python3 "$flood" tcp 127.0.0.1:$port 1100 "$out/ready" >"$out/flood" 2>&1 &
    pids+=($!)
    ;;
  *) echo "unknown case $case_"; exit 2 ;;
esac
for _ in $(seq 600); do [ -s "$out/ready" ] && break; sleep 0.05; done
[ -s "$out/ready" ] || fail "the flood did not start"
cat "$out/flood"
run_rank 1 || fail "$case_: rank 1 failed"
wait "$r0" || fail "$case_: rank 0 failed"
for r in 0 1; do grep -q "rank $r of 2: sum 3 ok" "$out/rank$r" || fail "$case_: rank $r did not reduce"; done
[ "$case_" != unix-other ] || grep -q "closed a connection to .* from another user (uid $(id -u nobody)" "$out/rank0" ||
  fail "unix-other: rank 0 did not say it closed another user's connections"
[ "$case_" != emfile ] || grep -q "dropped a connection from .*: more than [0-9]* connections waiting for their handshake" "$out/rank0" ||
  fail "emfile: the rendezvous never had to drop a connection (the test proved nothing)"
echo "ok: $case_"
