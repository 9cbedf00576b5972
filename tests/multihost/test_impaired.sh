#!/usr/bin/env bash
# Exact results over impaired links: every host drops 5% of what it sends and limits it to
# 20 MB/s (tools/hora-netns impair: netem, or nftables where the kernel has no netem); a sample
# of collectives up to 8 MiB, then Send/Recv between every pair, on 3 hosts of 1, 2 and 1 ranks.
#   test_impaired.sh HORA_NETNS MH_RANK
NETNS=$1 RANK_BIN=$2
. "${0%/*}/lib.sh" || exit 1

mh_up 3
for h in 0 1 2; do
  "$NETNS" impair $h -p "$MH_PREFIX" --loss 5 --rate 20 >"$MH_OUT/impair.log" 2>&1 ||
    fail "hora-netns impair $h: $(cat "$MH_OUT/impair.log")"
done
cat "$MH_OUT/impair.log"
export HORA_TIMEOUT_MS=60000  # a bound on a hang, not a timing
start=$SECONDS
mh_start impaired "0 1 1 2" sample
mh_wait
mh_expect_done impaired
mh_check_links impaired
# The impairment bit: TCP had to resend what the hosts dropped (5% of some hundreds of segments).
resent=0
for h in 0 1 2; do
  n=$("$NETNS" exec $h -p "$MH_PREFIX" nstat -asz TcpRetransSegs | awk '$1 == "TcpRetransSegs" {print $2}')
  resent=$((resent + ${n:-0}))
done
[ $resent -gt 0 ] || fail "no TCP segment was resent: the links were not impaired"
echo "ok: $(mh_fact impaired 0 ran | wc -l) collectives exact on every rank in $((SECONDS - start)) s, $resent TCP segments resent"
