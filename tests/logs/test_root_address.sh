#!/usr/bin/env bash
# HORA_ROOT at an address that is not rank 0's: rank 0 refuses at once, naming the address and
# this host's addresses; a rank that cannot reach the rendezvous warns every 10 s where it is
# still trying, and its timeout names the address and that rank 0 hosts it.
#   test_root_address.sh ALLREDUCE_PERF
perf=$1
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
secret=$(head -c32 /dev/urandom | od -An -tx1 | tr -d ' \n')

# 198.51.100.7 (TEST-NET-2) is no host's address. The timeout only bounds a hang.
HORA_TIMEOUT_MS=60000 HORA_ROOT=198.51.100.7:29990 HORA_SECRET=$secret HORA_RANK=0 HORA_SIZE=2 \
  timeout 120 "$perf" -b 8 -e 8 -n 1 -w 0 >"$out/root" 2>&1 && fail "rank 0 accepted a rendezvous address not its own"
grep -q 'the rendezvous address 198.51.100.7:29990 .*rank 0 hosts it, but 198.51.100.7:29990 is not an address of this host' "$out/root" ||
  fail "rank 0's error does not name the address: $(tail -2 "$out/root")"
grep -q "this host's addresses: .*lo 127.0.0.1" "$out/root" || fail "rank 0's error does not list this host's addresses: $(tail -2 "$out/root")"
grep -q 'timed out' "$out/root" && fail "rank 0 waited for its timeout instead of refusing at once"

# Rank 1 with nobody listening at the root: a warning after 10 s, then its timeout (12 s).
port=$("$(dirname "$0")/../free_port.sh")
HORA_TIMEOUT_MS=12000 HORA_ROOT=127.0.0.1:$port HORA_SECRET=$secret HORA_RANK=1 HORA_SIZE=2 \
  timeout 120 "$perf" -b 8 -e 8 -n 1 -w 0 >"$out/rank1" 2>&1 && fail "rank 1 joined a rendezvous nobody hosts"
grep -q "WARN BOOTSTRAP still waiting to reach 127.0.0.1:$port" "$out/rank1" ||
  fail "no warning of where rank 1 is still trying: $(tail -3 "$out/rank1")"
grep -q "timed out after 12000 ms .*joining the rendezvous at 127.0.0.1:$port, which rank 0 hosts" "$out/rank1" ||
  fail "rank 1's timeout does not name the rendezvous: $(tail -2 "$out/rank1")"
echo "ok"
