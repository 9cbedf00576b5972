#!/usr/bin/env bash
# Every rank learns every host's topology at init: hora-topo started as 3 ranks prints, on rank 0
# only, one host holding ranks 0, 1 and 2, and with HORA_TOPO_FILE each rank sends the file's
# machine (2 packages, 2 NUMA nodes, 16 cores, 32 PUs) as its host.
#   test_topo_job.sh HORA_RUN HORA_TOPO
set -u
run=$1 topo=$2
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
"$run" -n 3 --no-prefix "$topo" --json >"$out/json" 2>&1 || fail "hora-topo in a job: $(tail -3 "$out/json")"
[ "$(grep -c '"hosts"' "$out/json")" -eq 1 ] || fail "expected one report (rank 0's), got: $(cat "$out/json")"
grep -q '"ranks": \[0, 1, 2\]' "$out/json" || fail "the host does not list ranks 0, 1, 2: $(cat "$out/json")"
if command -v lstopo >/dev/null; then
  lstopo --input "pack:2 numa:1 core:8 pu:2" --of xml "$out/two.xml" || fail "lstopo"
  HORA_TOPO_FILE="$out/two.xml" "$run" -n 2 --no-prefix "$topo" --json >"$out/two" 2>&1 || fail "with a file: $(tail -3 "$out/two")"
  grep -q '"packages": 2, "numa_nodes": 2, "cores": 16, "pus": 32, .*"ranks": \[0, 1\]' "$out/two" ||
    fail "the file's machine did not travel: $(cat "$out/two")"
else
  echo "SKIP the HORA_TOPO_FILE part: lstopo (package hwloc) is not installed"
fi
echo ok
