# Shared by the multi-host tests: a cluster of its own (tools/hora-netns, a prefix and subnet
# made from this shell's pid, removed on exit), ranks started on its hosts, and checks of what
# tests/multihost/mh_rank printed. Sourced; the test sets NETNS (tools/hora-netns) and RANK_BIN
# (mh_rank) first.
set -u
MH_PREFIX=$(printf 'mh%s' "$$" | cut -c1-9)
MH_SUBNET=10.214.$(($$ % 250 + 1))
MH_OUT=$(mktemp -d)
MH_PIDS=()
MH_HOSTS=()  # the host of each rank of the last job

mh_cleanup() {
  local p
  for p in "${MH_PIDS[@]}"; do kill -9 "$p" 2>/dev/null; done
  "$NETNS" down -p "$MH_PREFIX" >/dev/null 2>&1
  rm -rf "$MH_OUT"
}
trap mh_cleanup EXIT

fail() {
  echo "FAIL: $*"
  exit 1
}

# mh_up H: a cluster of H hosts, or a skip (77) that says why.
mh_up() {
  command -v ip >/dev/null || { echo "SKIP: no 'ip' (iproute2)"; exit 77; }
  "$NETNS" down -p "$MH_PREFIX" >/dev/null 2>&1
  local rc=0
  "$NETNS" up "$1" -p "$MH_PREFIX" -s "$MH_SUBNET" >"$MH_OUT/up.log" 2>&1 || rc=$?
  if [ $rc -eq 77 ]; then
    echo "SKIP: $(cat "$MH_OUT/up.log")"
    exit 77
  fi
  [ $rc -eq 0 ] || fail "hora-netns up $1: $(cat "$MH_OUT/up.log")"
}

# mh_start NAME "HOST_OF_RANK0 HOST_OF_RANK1 ..." ARGS...: one rank per entry, started in its
# host's namespace, each writing NAME.<rank>.log; the environment passes through (HORA_*).
mh_start() {
  local name=$1 r=0 h secret root
  read -r -a MH_HOSTS <<<"$2"
  shift 2
  secret=$(head -c32 /dev/urandom | od -An -tx1 | tr -d ' \n')
  root=$("$NETNS" addr "${MH_HOSTS[0]}" -p "$MH_PREFIX"):29600
  MH_PIDS=()
  for h in "${MH_HOSTS[@]}"; do
    HORA_ROOT=$root HORA_SECRET=$secret HORA_RANK=$r HORA_SIZE=${#MH_HOSTS[@]} \
      timeout -s KILL 300 "$NETNS" exec "$h" -p "$MH_PREFIX" "$RANK_BIN" "$@" >"$MH_OUT/$name.$r.log" 2>&1 &
    MH_PIDS+=($!)
    r=$((r + 1))
  done
}

# mh_wait: waits for the job's ranks; MH_STATUS holds their exit statuses.
mh_wait() {
  local p
  MH_STATUS=()
  for p in "${MH_PIDS[@]}"; do
    # (The shell's notice of a rank killed by a test is not wanted in the log.)
    if { wait "$p"; } 2>/dev/null; then MH_STATUS+=(0); else MH_STATUS+=($?); fi
  done
  MH_PIDS=()
}

# mh_log NAME RANK: what that rank printed.
mh_log() { cat "$MH_OUT/$1.$2.log"; }

# mh_fact NAME RANK WORD: the rest of that rank's lines that start with "WORD RANK ".
mh_fact() { sed -n "s/^$3 $2 //p" "$MH_OUT/$1.$2.log"; }

# mh_check_links NAME: every rank reached every peer of its host over shm and every other over
# tcp, as its communicator says per peer.
mh_check_links() {
  local name=$1 n=${#MH_HOSTS[@]} r p want got
  for ((r = 0; r < n; r++)); do
    for ((p = 0; p < n; p++)); do
      [ $p -ne $r ] || continue
      want=tcp
      [ "${MH_HOSTS[$r]}" != "${MH_HOSTS[$p]}" ] || want=shm
      got=$(mh_fact "$name" $r link | awk -v p=$p '$1 == p {print $2}')
      [ "$got" = "$want" ] || fail "$name: rank $r (host ${MH_HOSTS[$r]}) reaches rank $p (host ${MH_HOSTS[$p]}) over '$got', not $want"
    done
  done
}

# mh_expect_done NAME: every rank exited 0 and said done, with no wrong result.
mh_expect_done() {
  local name=$1 r
  for ((r = 0; r < ${#MH_HOSTS[@]}; r++)); do
    if [ "${MH_STATUS[$r]}" -ne 0 ] || [ -z "$(grep "^done $r" "$MH_OUT/$name.$r.log")" ]; then
      fail "$name: rank $r (host ${MH_HOSTS[$r]}) exited ${MH_STATUS[$r]}:
$(grep -v '^ran \|^link \|^unfit ' "$MH_OUT/$name.$r.log" | tail -20)"
    fi
    ! grep -q "^wrong " "$MH_OUT/$name.$r.log" || fail "$name: rank $r: $(grep '^wrong ' "$MH_OUT/$name.$r.log" | head -5)"
  done
}

# mh_pids: "rank pid" of every rank of the last job, from their "pid" lines.
mh_pid() { mh_fact "$1" "$2" pid; }
