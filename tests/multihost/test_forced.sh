#!/usr/bin/env bash
# A forced algorithm that cannot run across hosts: HORA_ALGO=allreduce:flat (the shared stage,
# one host only) on 2 hosts fails the call on every rank, saying why and naming the algorithms
# that could run it, each one of the registry's (as HORA_ALGO=nonsense lists them) and not flat.
# Then HORA_SOCKET_IFNAME=lo across hosts: every rank says a loopback address was advertised.
#   test_forced.sh HORA_NETNS MH_RANK
NETNS=$1 RANK_BIN=$2
. "${0%/*}/lib.sh" || exit 1

mh_up 2
export HORA_TIMEOUT_MS=30000  # a bound on a hang, not a timing
# The registry's names, from the error of a name that is none.
HORA_ALGO=nonsense mh_start nonsense "0 1" one
mh_wait
names=$(mh_fact nonsense 0 error | sed -n "s/.*'nonsense' is not an algorithm (expected auto, one of \(.*\), or collective:algorithm pairs).*/\1/p")
[ -n "$names" ] || fail "HORA_ALGO=nonsense: no list of algorithms in: $(mh_log nonsense 0 | tail -3)"
echo "algorithms: $names"

for layout in "0 1" "0 1 1 0"; do
  HORA_ALGO=allreduce:flat mh_start forced "$layout" one
  mh_wait
  for ((r = 0; r < ${#MH_HOSTS[@]}; r++)); do
    text=$(mh_fact forced $r error)
    [ "${MH_STATUS[$r]}" -eq 3 ] || fail "$layout: rank $r exited ${MH_STATUS[$r]}, not with a failed call: $(mh_log forced $r | tail -3)"
    [[ "$text" == *"HORA_ALGO forces flat for AllReduce, which cannot run "*" here: "*"(what could: "*")"* ]] ||
      fail "$layout: rank $r: the error does not say why and what could: $text"
    could=$(sed 's/.*(what could: \([^)]*\)).*/\1/' <<<"$text")
    for a in ${could//,/ }; do
      [ "$a" != flat ] || fail "$layout: rank $r: flat among what could: $text"
      [[ ", $names, " == *", $a, "* ]] || fail "$layout: rank $r: '$a' is not an algorithm: $text"
    done
  done
  mh_check_links forced
  echo "hosts of ranks $layout: rank 0: $(mh_fact forced 0 error)"
done

# HORA_SOCKET_IFNAME=lo across hosts: every rank fails init saying that a loopback address was
# advertised to a rank on another host (not a connection refused, or a peer's timeout).
HORA_SOCKET_IFNAME=lo mh_start lo "0 1" one
mh_wait
for r in 0 1; do
  [ "${MH_STATUS[$r]}" -ne 0 ] || fail "HORA_SOCKET_IFNAME=lo: rank $r succeeded across hosts"
  text=$(mh_fact lo $r error)
  [[ "$text" == *"rank 0 ("*") advertised the loopback address 127.0.0.1:"*" for TCP to rank 1 ("*"), on another host, which cannot reach it: choose with HORA_SOCKET_IFNAME"* ]] ||
    fail "HORA_SOCKET_IFNAME=lo: rank $r does not say a loopback address was advertised: $(mh_log lo $r | tail -3)"
done
echo "HORA_SOCKET_IFNAME=lo: $(mh_fact lo 1 error)"
echo ok
