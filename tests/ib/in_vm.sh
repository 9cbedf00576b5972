#!/usr/bin/env bash
# The ib tests, inside the Soft-RoCE VM (tests/ib/run.sh starts it): ranks of one job are
# processes of the VM that meet at 127.0.0.1 and move every byte over rxe0 (HORA_TRANSPORTS=ib).
#   in_vm.sh MODE BUILD_DIR
# MODE: contract | collectives | regcache | faults | hosts (the suite's), or sweep (by hand). Prints what it checks; exit 0 or 1.
set -u
mode=$1
build=$2
rank_bin=$build/tests/mh_rank
out=$(mktemp -d)
export HORA_TRANSPORTS=ib HORA_CHUNK_BYTES=64K
job=0
fails=0

fail() {
  echo "FAIL: $*"
  fails=$((fails + 1))
}

# start NAME N ARGS...: N ranks of mh_rank, each logging to $out/NAME.<rank>.log; PIDS holds them.
start() {
  local name=$1 n=$2 r
  shift 2
  job=$((job + 1))
  PIDS=()
  for ((r = 0; r < n; r++)); do
    HORA_ROOT=127.0.0.1:$((29600 + job)) HORA_SECRET=$(printf '%064x' $job) HORA_RANK=$r HORA_SIZE=$n \
      timeout -s KILL 900 "$rank_bin" "$@" >"$out/$name.$r.log" 2>&1 &
    PIDS+=($!)
  done
}

# finish: waits for the ranks; STATUS holds their exit statuses.
finish() {
  local p
  STATUS=()
  for p in "${PIDS[@]}"; do
    if { wait "$p"; } 2>/dev/null; then STATUS+=(0); else STATUS+=($?); fi
  done
}

log() { cat "$out/$1.$2.log"; }

# exact NAME N ARGS...: a job whose every rank must finish exactly, over ib to every peer.
exact() {
  local name=$1 n=$2 r p
  start "$@"
  finish
  for ((r = 0; r < n; r++)); do
    if [ "${STATUS[$r]}" -ne 0 ] || ! grep -q "^done $r" "$out/$name.$r.log"; then
      fail "$name: rank $r exited ${STATUS[$r]}:"
      log "$name" "$r" | grep -v '^ran ' | head -20
      continue
    fi
    for ((p = 0; p < n; p++)); do
      [ $p -eq $r ] || grep -q "^link $r $p ib$" "$out/$name.$r.log" || fail "$name: rank $r did not reach rank $p over ib"
    done
  done
  grep -h "^ran 0 " "$out/$name.0.log" | sed "s/^/  $name: /" | head -40
}

case $mode in
  contract)
    # The big messages (over 4 GiB) need more memory than the VM has; every other case runs.
    "$build/tests/test_transport_contract" "~[big]" -c ib || fail "the transport contract over ib"
    ;;
  collectives)
    # Every collective, a sample of dtypes and ops, 1 to 12 MiB, in place and out, exactly.
    for n in 2 3; do exact "sample$n" $n sample; done
    # 64 MiB buffers, at the default pipeline chunk as a user would run them.
    HORA_CHUNK_BYTES=512K exact large2 2 large AllReduce ReduceScatter
    HORA_CHUNK_BYTES=512K exact large3 3 large AllGather
    # NCCL's ABI over ib: the program written against nccl.h (every collective, registrations,
    # windows, a killed rank shrunk away), with libhora preloaded so that its memory hooks keep
    # the registration cache (and so ncclCommRegister's registrations) on.
    HORA_TRANSPORTS=ib LD_PRELOAD="$build/libhora.so.0" HORA_TIMEOUT_MS=30000 "$build/tests/nccl/nccl_app" 3 host ||
      fail "the NCCL program over ib"
    ;;
  hosts)
    # Two "hosts" (network namespaces made by tools/hora-netns inside the VM; the RDMA device is
    # shared by every namespace) of two ranks, every transport enabled: ranks of one host take
    # shared memory, ranks of different hosts ib, not TCP, with no HORA_TRANSPORTS (one AllReduce:
    # the links are the point; results across hosts are checked by the multihost tests).
    (
      unset HORA_TRANSPORTS
      NETNS=$(dirname "$0")/../../tools/hora-netns
      RANK_BIN=$rank_bin
      . "$(dirname "$0")/../multihost/lib.sh"
      mh_up 2
      mh_start hosts "0 0 1 1" one
      mh_wait
      bad=0
      for r in 0 1 2 3; do
        [ "${MH_STATUS[$r]}" -eq 0 ] && grep -q "^done $r" "$MH_OUT/hosts.$r.log" || {
          echo "FAIL: rank $r exited ${MH_STATUS[$r]}: $(grep -v '^ran' "$MH_OUT/hosts.$r.log" | head -5)"
          bad=1
        }
        for p in 0 1 2 3; do
          [ $p -ne $r ] || continue
          want=ib
          [ $((r / 2)) -ne $((p / 2)) ] || want=shm
          grep -q "^link $r $p $want$" "$MH_OUT/hosts.$r.log" || {
            echo "FAIL: rank $r reached rank $p over $(sed -n "s/^link $r $p //p" "$MH_OUT/hosts.$r.log"), not $want"
            bad=1
          }
        done
      done
      [ $bad -eq 0 ] && echo "  links: shm within a host, ib between the two"
      exit $bad
    ) || fail "two hosts"
    ;;
  sweep)
    # Every collective x every algorithm that implements it (long under emulation: by hand).
    for n in 2 3; do exact "sweep$n" $n sweep; done
    ;;
  regcache)
    exact regcache 2 regcache
    for r in 0 1; do
      line=$(sed -n "s/^regcache $r //p" "$out/regcache.$r.log")
      echo "  rank $r: $line; $(sed -n "s/^reused $r //p" "$out/regcache.$r.log")"
      read -r _ hits _ misses _ inval _ caching <<<"$line"
      [ "${caching:-0}" = 1 ] || fail "rank $r: the registration cache is off in mh_rank (memory hooks inactive?)"
      [ "${hits:-0}" -ge 1 ] || fail "rank $r: no registration was reused ($line)"
      [ "${inval:-0}" -ge 1 ] || fail "rank $r: no registration was invalidated by free or munmap ($line)"
    done
    ;;
  faults)
    # A rank killed mid-transfer: every other one fails, naming it (host and pid).
    start kill 3 loop 1048576
    for _ in $(seq 600); do
      n=$(cat "$out"/kill.*.log 2>/dev/null | grep -c '^looping')
      [ "$n" -ge 3 ] && break
      kill -0 "${PIDS[0]}" "${PIDS[1]}" "${PIDS[2]}" 2>/dev/null || break
      sleep 0.2
    done
    victim=$(sed -n 's/^pid 2 //p' "$out/kill.2.log")
    sleep 1
    kill -9 "$victim"
    t0=$(date +%s)
    finish
    echo "  the survivors returned within $(($(date +%s) - t0)) s of the kill"
    for r in 0 1; do
      text=$(sed -n "s/^error $r //p" "$out/kill.$r.log")
      echo "  rank $r: $text"
      [ "${STATUS[$r]}" -eq 3 ] || fail "rank $r exited ${STATUS[$r]} after rank 2 was killed: $(log kill $r | tail -3)"
      case $text in *"rank 2 ("*"pid $victim)"*) ;; *) fail "rank $r's error does not name rank 2 (pid $victim): $text" ;; esac
    done
    # A HORA_IB_HCA that matches no port: a clear error on every rank, naming the filter and
    # what the host has.
    HORA_IB_HCA=mlx9_0 start hca 2 one
    finish
    for r in 0 1; do
      text=$(sed -n "s/^error $r //p" "$out/hca.$r.log")
      echo "  rank $r: $text"
      [ "${STATUS[$r]}" -eq 2 ] || fail "rank $r exited ${STATUS[$r]} with HORA_IB_HCA=mlx9_0"
      case $text in *"HORA_IB_HCA='mlx9_0'"*"$RDMA_VM_DEV"*) ;; *) fail "rank $r: the error does not name the filter and $RDMA_VM_DEV: $text" ;; esac
    done
    ;;
  *)
    echo "usage: in_vm.sh contract|collectives|large|regcache|faults BUILD_DIR"
    exit 2
    ;;
esac
rm -rf "$out"
[ $fails -eq 0 ] || exit 1
echo "ok: $mode"
