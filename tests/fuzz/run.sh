#!/usr/bin/env bash
# Builds the fuzz harnesses (build.sh) and runs them: one, or all of them at once, each for the
# given seconds of wall time, starting from its checked-in corpus (tests/fuzz/corpus/<harness>/,
# every input of which is run first, so the reproducers stay fixed).
#
#   tests/fuzz/run.sh HARNESS|all [SECONDS]    e.g. tests/fuzz/run.sh frame 600
#
# SECONDS defaults to FUZZ_SECONDS, else 20 (what the suite's `fuzz` test runs).
# BUILD (default ./build) is the project's build directory; what a run finds goes under
# BUILD/fuzz: corpus/<harness>/ (new inputs), artifacts/<harness>/ (crashes, as reproducers),
# logs/<harness>.log. A crash or a broken invariant fails the run and prints the reproducer and
# the command that replays it. Exits 77 (skip) when clang or libFuzzer is missing.
set -uo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
which=${1:?usage: run.sh HARNESS|all [SECONDS]}
secs=${2:-${FUZZ_SECONDS:-20}}
build=${BUILD:-$src/build}
out=$build/fuzz

if [ -n "${FUZZ_SANITIZE:-}" ] && [ "$FUZZ_SANITIZE" != none ]; then
  echo "SKIP: this build's library is compiled with -fsanitize=$FUZZ_SANITIZE; the harnesses link it into" \
       "clang's sanitizer runtime, which does not mix with gcc's: run them from a build without b_sanitize" >&2
  exit 77
fi
"$src/tests/fuzz/build.sh" "$build" "$out"
rc=$?
[ $rc -eq 0 ] || exit $rc

if [ "$which" = all ]; then
  harnesses=()
  for f in "$src"/tests/fuzz/fuzz_*.cc; do h=$(basename "$f" .cc); harnesses+=("${h#fuzz_}"); done
else
  harnesses=("$which")
  [ -x "$out/$which" ] || { echo "no harness '$which' (tests/fuzz/fuzz_$which.cc)" >&2; exit 2; }
fi

# A small quarantine: several harnesses run at once, each would otherwise hold 256 MB of freed memory.
export ASAN_OPTIONS=${ASAN_OPTIONS:-quarantine_size_mb=32:malloc_context_size=10}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1}
mkdir -p "$out/logs"
declare -A pid
for h in "${harnesses[@]}"; do
  mkdir -p "$out/corpus/$h" "$out/artifacts/$h"
  rm -f "$out/artifacts/$h"/*
  dict=()
  [ -f "$src/tests/fuzz/$h.dict" ] && dict=(-dict="$src/tests/fuzz/$h.dict")
  "$out/$h" "$out/corpus/$h" "$src/tests/fuzz/corpus/$h" "${dict[@]}" -max_total_time="$secs" -timeout=60 -error_exitcode=1 \
    -rss_limit_mb=2048 -max_len=4096 -print_final_stats=1 -artifact_prefix="$out/artifacts/$h/" \
    > "$out/logs/$h.log" 2>&1 &
  pid[$h]=$!
done

failed=0
for h in "${harnesses[@]}"; do
  wait "${pid[$h]}"
  status=$?
  log=$out/logs/$h.log
  done_line=$(grep -E '^#[0-9]+[[:space:]]+DONE' "$log" | tail -1)
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  if [ $status -eq 0 ]; then
    printf '%-17s ok    %s executions in %ss; %s\n' "$h" "${execs:-?}" "$secs" \
      "$(echo "$done_line" | grep -oE 'cov: [0-9]+ ft: [0-9]+ corp: [0-9]+/[0-9]+[a-zA-Z]*')"
  else
    failed=1
    repro=$(ls -t "$out/artifacts/$h"/* 2>/dev/null | head -1)
    echo "$h FAILED (exit $status): the log is $log"
    grep -E 'fuzz invariant broken|ERROR: (AddressSanitizer|libFuzzer|LeakSanitizer)|runtime error' "$log" | head -5
    tail -n 40 "$log" | grep -vE '^(#|")' | tail -n 25
    if [ -n "$repro" ]; then
      echo "reproducer: $repro"
      echo "replay:     $out/$h $repro"
    fi
  fi
done
exit $failed
