#!/usr/bin/env bash
# Measures Hora's allreduce beside Open MPI over TCP and Gloo's ring in one run, and prints one
# table per rank count: time (us) and busbw (GB/s) of each, and Hora's ratio to each.
#   perf/compare.sh [-n "2 4"] [-b 8] [-e 128M] [-f 4] [-r ROUNDS]
# Needs a build in ./build and ../shared/bench/anchors.sh (or ANCHORS=path). Each size is run
# ROUNDS times alternating Hora and the peers (the machine is noisy); the median is kept.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
anchors=${ANCHORS:-$here/../shared/bench/anchors.sh}
ns="2 4"; b=8; e=128M; f=4; rounds=3
while getopts "n:b:e:f:r:" o; do case $o in
  n) ns=$OPTARG;; b) b=$OPTARG;; e) e=$OPTARG;; f) f=$OPTARG;; r) rounds=$OPTARG;; *) exit 2;; esac; done
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for n in $ns; do
  for ((k = 0; k < rounds; k++)); do
    "$here/build/tools/hora-run" -n "$n" --no-prefix "$here/build/perf/allreduce_perf" -b "$b" -e "$e" -f "$f" -c 0 \
      | awk '$1 ~ /^[0-9]+$/ {print $1, $6, $8}' >> "$out/hora.$n"
    "$anchors" -L -n "$n" -c allreduce -p "ompi-tcp" -b "$b" -e "$e" -f "$f" \
      | awk '$1 ~ /^[0-9]+$/ {print $1, $5, $7}' >> "$out/ompi.$n"
    "$anchors" -L -n "$n" -c allreduce -p "gloo-ring" -b "$b" -e "$e" -f "$f" \
      | awk '$1 ~ /^[0-9]+$/ {print $1, $5, $7}' >> "$out/gloo.$n"
  done
  echo "## allreduce, float sum, $n ranks, TCP on loopback (median of $rounds rounds)"
  printf "%12s | %10s %8s | %10s %8s | %10s %8s | %8s %8s\n" size hora_us hora_bw ompi_us ompi_bw gloo_us gloo_bw x_ompi x_gloo
  /usr/bin/python3 - "$out/hora.$n" "$out/ompi.$n" "$out/gloo.$n" <<'PY'
import sys, statistics
def load(p):
    d = {}
    for line in open(p):
        s, t, bw = line.split()
        d.setdefault(int(s), []).append((float(t), float(bw)))
    return {s: (statistics.median(t for t, _ in v), statistics.median(b for _, b in v)) for s, v in d.items()}
h, o, g = (load(p) for p in sys.argv[1:4])
for s in sorted(h):
    ht, hb = h[s]; ot, ob = o.get(s, (float('nan'),) * 2); gt, gb = g.get(s, (float('nan'),) * 2)
    print(f"{s:12d} | {ht:10.2f} {hb:8.3f} | {ot:10.2f} {ob:8.3f} | {gt:10.2f} {gb:8.3f} | {ot / ht:8.2f} {gt / ht:8.2f}")
PY
done
echo "(x_ompi, x_gloo: the peer's time over Hora's; above 1 means Hora is faster)"
