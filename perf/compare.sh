#!/usr/bin/env bash
# The first comparison, kept for its command line: Hora's allreduce beside Open MPI over TCP
# and Gloo's ring, one table per rank count (medians of ROUNDS alternating rounds).
#   perf/compare.sh [-n "2 4"] [-b 8] [-e 128M] [-f 4] [-r ROUNDS]
# It is now perf/compare with these peers and defaults (see perf/compare -h): the tables
# carry both libraries' busbw and the peer/Hora time ratios, and the JSON files and the
# plot go to perf/results/<date>-<time>.
set -euo pipefail
ns="2 4"; b=8; e=128M; f=4; rounds=3
while getopts "n:b:e:f:r:" o; do case $o in
  n) ns=$OPTARG;; b) b=$OPTARG;; e) e=$OPTARG;; f) f=$OPTARG;; r) rounds=$OPTARG;; *) exit 2;; esac; done
exec "$(dirname "$0")/compare" -n "$ns" -c allreduce -p "ompi-tcp gloo-ring" -b "$b" -e "$e" -f "$f" -r "$rounds"
