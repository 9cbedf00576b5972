#!/usr/bin/env bash
# A host cut off or gone in the middle of a large AllReduce loop: every rank's call fails within
# the timeout (HORA_TIMEOUT_MS, 5 s here; the bound below is generous), and each rank's error
# text names a rank on the other side of the cut, by number and pid:
#   link  host 1's cable taken out (2 hosts of 3 and 2 ranks): every rank, on both sides, those
#         that wait only on ranks of their own host included
#   kill  every rank of host 2 SIGKILLed (3 hosts of 2 ranks): every rank of hosts 0 and 1
#   test_cut.sh HORA_NETNS MH_RANK link|kill
NETNS=$1 RANK_BIN=$2 how=$3
. "${0%/*}/lib.sh" || exit 1

export HORA_TIMEOUT_MS=5000
if [ "$how" = link ]; then mh_up 2; layout="0 0 0 1 1"; gone=1; else mh_up 3; layout="0 0 1 1 2 2"; gone=2; fi
mh_start cut "$layout" loop 1000000
n=${#MH_HOSTS[@]}
# Every rank in the loop (a call done), or a bound.
for ((i = 0; i < 600; i++)); do
  [ "$(cat "$MH_OUT"/cut.*.log | grep -c '^looping ')" -eq $n ] && break
  sleep 0.1
done
[ $i -lt 600 ] || fail "the ranks did not start looping: $(tail -n 3 "$MH_OUT"/cut.*.log)"
for ((r = 0; r < n; r++)); do pid[$r]=$(mh_pid cut $r); done
start=$SECONDS
if [ "$how" = link ]; then
  "$NETNS" link $gone down -p "$MH_PREFIX"
else
  for ((r = 0; r < n; r++)); do [ "${MH_HOSTS[$r]}" != $gone ] || kill -9 "${pid[$r]}"; done
fi
mh_wait
took=$((SECONDS - start))
[ $took -le 60 ] || fail "the ranks took $took s to fail, with a timeout of 5 s"

# names R TEXT SIDE: TEXT names a rank of SIDE ("other": another host than R's; "gone": host
# $gone) as "rank P (host, pid PID)".
names() {
  local r=$1 text=$2 side=$3 p
  for ((p = 0; p < n; p++)); do
    case $side in
      other) [ "${MH_HOSTS[$p]}" != "${MH_HOSTS[$r]}" ] || continue ;;
      gone) [ "${MH_HOSTS[$p]}" = $gone ] || continue ;;
    esac
    [[ "$text" == *"rank $p ("*", pid ${pid[$p]})"* ]] && return 0
  done
  return 1
}
for ((r = 0; r < n; r++)); do
  [ "$how" = link ] || [ "${MH_HOSTS[$r]}" != $gone ] || continue
  text=$(mh_fact cut $r error)
  [ "${MH_STATUS[$r]}" -eq 3 ] && [ -n "$text" ] ||
    fail "rank $r (host ${MH_HOSTS[$r]}) exited ${MH_STATUS[$r]} without a failed call: $(mh_log cut $r | tail -5)"
  echo "rank $r (host ${MH_HOSTS[$r]}): $text"
  if [ "$how" = link ]; then
    names $r "$text" other || fail "rank $r (host ${MH_HOSTS[$r]}): the error names no rank across the cut: $text"
  else
    names $r "$text" gone || fail "rank $r (host ${MH_HOSTS[$r]}): the error names no rank of host $gone: $text"
  fi
done
echo "ok: every rank failed in $took s, naming a rank across the cut"
