#!/bin/bash
# The checks of hora-soak (tools/hora_soak.cc), one case per run:
#   test_hora_soak.sh HORA_SOAK HORA_RUN CASE
# threads           3 ranks as threads, 300 calls from seed 1: every result right, exit 0
# hora-run          4 processes under hora-run, 300 calls from a seed rank 0 draws: exit 0
# corrupt           3 threads; the test hook flips a byte of one result on rank 1: the run must
#                   fail, and rank 1 must name the very call the hook corrupted
# corrupt-hora-run  the same on rank 2 of 4 processes under hora-run
# chaos             --chaos on 4 ranks, 16 rounds from seed 1: ranks killed, stopped and paused,
#                   new ranks after each fault; every survivor's error names the culprit, 0 wrong
# chaos-shrink      the same on 5 ranks with --shrink, 24 rounds from seed 2: the survivors
#                   shrink the communicator and go on
# chaos-hosts       --chaos --hosts 2x1 (two network namespaces of one rank each, made by
#                   hora-soak; root only, else a visible skip), 10 rounds from seed 2: a kill, a
#                   link cut and a stop come first; every survivor names the culprit (for a cut,
#                   the rank across it), and no namespace is left behind, also when the soak is
#                   ended by SIGTERM
# (the seeds fix which faults are drawn, not when they land: nothing here depends on timing)
set -u
soak=$1
run=$2
case_name=$3
out=$(mktemp)
trap 'rm -f "$out"' EXIT

fail() {
  echo "FAIL ($case_name): $*"
  echo "---- output"
  cat "$out"
  exit 1
}

passed() {
  grep -q "$1: PASSED" "$out" || fail "no '$1: PASSED' line"
  grep -q ' wrong: \| error: ' "$out" && fail "a rank reported a problem"
  return 0
}

# The corrupted call must fail the run and be the one named by the rank that holds it.
corrupted() {
  local rank=$1 status=$2
  [ "$status" -ne 0 ] || fail "exit status 0 although a result was corrupted"
  local call
  call=$(sed -n "s/.*rank $rank: corrupting element [0-9]* of the result of call \([0-9]*\) .*/\1/p" "$out")
  [ -n "$call" ] || fail "the test hook did not corrupt anything"
  grep -q "rank $rank: wrong: call $call (" "$out" || fail "rank $rank does not name call $call"
  grep -q "rank $rank: [0-9]* calls, 1 wrong results (1 elements), 0 errors" "$out" || fail "rank $rank does not count exactly one wrong result"
  grep -q ' 1 wrong results (1 elements), 0 errors.*: FAILED' "$out" || fail "rank 0's totals do not say 1 wrong result, FAILED"
  [ "$(grep -c ' wrong: ' "$out")" -eq 1 ] || fail "other results were reported wrong"
}

case $case_name in
  threads)
    "$soak" -N 3 -c 300 -s 1 >"$out" 2>&1 || fail "exit status $?"
    passed "300 calls in [0-9.]* s on 3 ranks: [0-9]* bytes moved ([^)]*), 0 wrong results (0 elements), 0 errors"
    grep -q 'seed 1,' "$out" || fail "the seed is not printed"
    ;;
  hora-run)
    "$run" -n 4 --timeout 280 "$soak" -c 300 >"$out" 2>&1 || fail "exit status $?"
    passed "300 calls in [0-9.]* s on 4 ranks: [0-9]* bytes moved ([^)]*), 0 wrong results (0 elements), 0 errors"
    grep -q 'seed [0-9]* (drawn)' "$out" || fail "the drawn seed is not printed"
    ;;
  corrupt)
    "$soak" -N 3 -c 80 -s 7 --corrupt-call 30:1 >"$out" 2>&1
    corrupted 1 $?
    ;;
  corrupt-hora-run)
    "$run" -n 4 --timeout 280 "$soak" -c 80 -s 11 --corrupt-call 40:2 >"$out" 2>&1
    corrupted 2 $?
    ;;
  chaos|chaos-shrink)
    dumps=$(mktemp -d)
    trap 'rm -f "$out"; rm -rf "$dumps"' EXIT
    if [ "$case_name" = chaos ]; then args=(-n 4 -r 16 -s 1); else args=(-n 5 -r 24 -s 2 --shrink); fi
    HORA_DUMP_DIR=$dumps "$soak" --chaos "${args[@]}" --timeout-ms 5000 >"$out" 2>&1 || fail "exit status $?"
    summary=$(grep 'hora-soak: chaos: [0-9]* rounds' "$out") || fail "no summary line"
    echo "$summary"
    echo "$summary" | grep -q ': PASSED$' || fail "not PASSED"
    echo "$summary" | grep -q ' 0 wrong results' || fail "wrong results"
    faults=$(echo "$summary" | sed -n 's/.* \([0-9]*\) faults injected.*/\1/p')
    errors=$(echo "$summary" | sed -n 's/.* \([0-9]*\) errors seen, \([0-9]*\) naming the culprit.*/\1 \2/p')
    [ "${faults:-0}" -gt 0 ] || fail "no fault injected"
    set -- $errors
    [ "${1:-0}" -gt 0 ] && [ "$1" = "$2" ] || fail "errors seen and errors naming the culprit differ: $errors"
    grep -q 'PROBLEM' "$out" && fail "a problem was reported"
    if [ "$case_name" = chaos-shrink ]; then
      echo "$summary" | grep -q ' 0 shrinks' && fail "no shrink"
    fi
    ;;
  chaos-hosts)
    dumps=$(mktemp -d)
    trap 'rm -f "$out"; rm -rf "$dumps"' EXIT
    command -v ip >/dev/null || { echo "SKIP: no 'ip' (iproute2): --hosts makes network namespaces with it"; exit 77; }
    status=0
    HORA_DUMP_DIR=$dumps "$soak" --chaos --hosts 2x1 -r 10 -s 2 --timeout-ms 3000 >"$out" 2>&1 || status=$?
    if [ $status -eq 77 ]; then
      echo "SKIP: $(grep 'skipped' "$out")"
      exit 77
    fi
    prefix=$(sed -n 's/.*(network namespaces \([a-z0-9]*\)h0\.\..*/\1/p' "$out" | head -1)
    [ -n "$prefix" ] || fail "the first line does not name the namespaces"
    ! ip netns list | grep -q "^$prefix" || fail "namespaces left behind: $(ip netns list | grep "^$prefix")"
    [ $status -eq 0 ] || fail "exit status $status"
    summary=$(grep 'hora-soak: chaos: [0-9]* rounds' "$out") || fail "no summary line"
    echo "$summary"
    echo "$summary" | grep -q ': PASSED$' || fail "not PASSED"
    echo "$summary" | grep -q ' 0 wrong results' || fail "wrong results"
    echo "$summary" | grep -q '(0 kills\|, 0 stops\|, 0 link cuts)' && fail "seed 2 draws a kill, a cut and a stop first"
    errors=$(echo "$summary" | sed -n 's/.* \([0-9]*\) errors seen, \([0-9]*\) naming the culprit.*/\1 \2/p')
    set -- $errors
    [ "${1:-0}" -gt 0 ] && [ "$1" = "$2" ] || fail "errors seen and errors naming the culprit differ: $errors"
    grep -q 'PROBLEM' "$out" && fail "a problem was reported"
    # Ended by a signal while its ranks run: the namespaces go with it. (Emptied first: the
    # background job opens the file when it is scheduled, and until then the loop below read the
    # first soak's line, named its namespaces, gone by then, and failed under load.)
    : >"$out"
    "$soak" --chaos --hosts 2x1 -t 120 -s 2 --timeout-ms 3000 >"$out" 2>&1 &
    pid=$!
    for ((i = 0; i < 300; i++)); do
      grep -q 'network namespaces' "$out" && break
      sleep 0.1
    done
    prefix=$(sed -n 's/.*(network namespaces \([a-z0-9]*\)h0\.\..*/\1/p' "$out" | head -1)
    [ -n "$prefix" ] || { kill -9 $pid; fail "the second soak did not start"; }
    ip netns list | grep -q "^$prefix" || fail "no namespaces while the soak runs"
    kill -TERM $pid
    wait $pid
    status=$?
    [ $status -eq 143 ] || fail "exit status $status after SIGTERM (128 + 15 expected)"
    ! ip netns list | grep -q "^$prefix" || fail "namespaces left behind after SIGTERM: $(ip netns list | grep "^$prefix")"
    ;;
  *)
    echo "unknown case $case_name"
    exit 2
    ;;
esac
echo "PASS ($case_name)"
