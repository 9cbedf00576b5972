#!/usr/bin/env bash
# Exact results across hosts: every collective x every algorithm of the registry that can run it
# here (forced in turn), a sample of dtypes and ops, in place and out, every root, then
# Send/Recv between every pair; on several layouts of ranks over hosts, some uneven, one with
# the ranks of a host not consecutive. Each pair of ranks must use shared memory within a host
# and TCP across.
#   test_exact.sh HORA_NETNS MH_RANK
NETNS=$1 RANK_BIN=$2
. "${0%/*}/lib.sh" || exit 1

mh_up 4
export HORA_TIMEOUT_MS=60000  # a bound on a hang, not a timing
for layout in "0 1" "0 0 1 1" "0 1 1 2 2 2" "0 1 0 1" "0 0 1 1 2 2 3 3"; do
  name=L${layout// /}
  start=$SECONDS
  # Small pipeline chunks, so that the large cases (1 MiB) run many; the default on 2 hosts.
  chunk=64K
  [ "$layout" != "0 1" ] || chunk=512K
  HORA_CHUNK_BYTES=$chunk mh_start "$name" "$layout" sweep
  mh_wait
  mh_expect_done "$name"
  mh_check_links "$name"
  # Every collective ran exactly under at least one algorithm; the others the planner refused
  # to force here, saying why.
  for coll in AllReduce Broadcast Reduce AllGather ReduceScatter AllToAll Barrier Gather Scatter Send/Recv; do
    n=$(mh_fact "$name" 0 ran | awk -v c="$coll" 'index($1, c ":") == 1 && $2 > 0' | wc -l)
    [ "$n" -gt 0 ] || fail "$name: no algorithm ran $coll: $(mh_fact "$name" 0 unfit | grep "^$coll:" | head -3)"
  done
  echo "hosts of ranks $layout (chunks of $chunk): $((SECONDS - start)) s; ran (cases): $(mh_fact "$name" 0 ran | awk '$2 > 0 {printf "%s(%s) ", $1, $2}')"
  echo "  not applicable here: $(mh_fact "$name" 0 unfit | awk '{print $1}' | tr '\n' ' ')"
done
echo ok
