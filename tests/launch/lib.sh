# Shared by the launch tests. Sourced: sets `out` (a directory removed on exit, with every
# process in `pids` killed), `secret` (64 hex digits) and `fail` (which shows the tails of what
# the ranks wrote to $out).
out=$(mktemp -d)
pids=()
trap 'kill "${pids[@]}" 2>/dev/null; rm -rf "$out"' EXIT
fail() { echo "FAIL: $*" >&2; for f in "$out"/*; do [ -f "$f" ] && { echo "== $f"; tail -8 "$f"; } >&2; done; exit 1; }
secret=$(head -c32 /dev/urandom | od -An -tx1 | tr -d ' \n')

# free_port: a port P such that P and P + 10000 are free now on 127.0.0.1 (the rendezvous
# beside MASTER_PORT takes P + 10000), both below the ephemeral range (tests/free_port.sh).
free_port() { "$(dirname "${BASH_SOURCE[0]}")/../free_port.sh" 10000; }
