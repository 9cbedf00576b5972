#!/usr/bin/env bash
# The sanitizer runs of CI (.ci/run): two builds beside build/, each of only the programs its
# tests need, and the subsets of the suite that cover the threads and the failure paths
# (docs/testing.md says which and why, and how long they take).
#   scripts/test-sanitizers.sh [asan] [tsan]      (default: both)
# asan  build-asan, -Db_sanitize=address,undefined: parsers and the executor (unit), every way a
#       peer can fail (faults, fault-matrix, their TCP twins), shrink and non-blocking inits, host
#       streams, bad arguments, the transport contract, and a chaos soak with shrink;
# tsan  build-tsan, -Db_sanitize=thread: what runs ranks as threads of one process (groups,
#       send/recv, splits and barriers of the collectives, streams, communicator lifecycle, the
#       executor, the log written from 6 threads, bad arguments, random calls as threads with
#       hora-soak), and the failure paths' threads (faults: abort from another thread, peers
#       killed and stopped; a chaos soak, whose ranks are processes with their progress threads).
# SANITIZE_JOBS (default 2) compile jobs; ASAN_BUILD and TSAN_BUILD the build directories.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=${SANITIZE_JOBS:-2}
asan_dir=${ASAN_BUILD:-build-asan}
tsan_dir=${TSAN_BUILD:-build-tsan}
which=("$@")
[ ${#which[@]} -gt 0 ] || which=(asan tsan)
# CI has no CUDA toolkit; the fuzz harnesses are clang's and do not mix with gcc's runtimes; the
# perf tools built with MPI are not among the subsets.
opts=(-Dcuda=disabled -Dfuzz=disabled -Dmpi=disabled)
supp=$PWD/tests/sanitizers

# A UBSan report fails the test (by default UBSan prints and goes on); LeakSanitizer is on.
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:suppressions=$supp/ubsan.supp"
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=0"
export LSAN_OPTIONS="suppressions=$supp/lsan.supp"
# The process tests fork ranks, and TSan's own background thread makes every process
# multi-threaded: die_after_fork=0 lets a forked rank start threads (docs/testing.md).
export TSAN_OPTIONS="die_after_fork=0:halt_on_error=1:second_deadlock_stack=1:suppressions=$supp/tsan.supp"

step() {  # step NAME COMMAND...: runs it and says how long it took
  local name=$1 t0=$SECONDS
  shift
  echo "== $name"
  "$@"
  echo "== $name: $((SECONDS - t0)) s"
}

mtest() {  # mtest DIR ARGS...: meson test, and on a failure the failed assertions again, last
  local dir=$1
  shift
  meson test -C "$dir" "$@" || { scripts/ci-failures.py "$dir"; return 1; }
}

build() {  # build DIR SANITIZE TARGETS...
  local dir=$1 san=$2
  shift 2
  [ -d "$dir" ] || meson setup "$dir" "${opts[@]}" -Db_sanitize="$san" >/dev/null
  ninja -C "$dir" -j "$jobs" "$@"
}

for w in "${which[@]}"; do
  case $w in
    asan)
      step "asan build" build "$asan_dir" address,undefined \
        tests/test_frame tests/test_handshake tests/test_acceptor tests/test_tcp_connection tests/test_config \
        tests/test_record tests/test_executor tests/test_faults tests/test_fault_matrix tests/test_comm_lifecycle \
        tests/test_streams tests/test_api_args tests/test_transport_contract perf/hora-soak tools/hora-run
      step "asan tests" mtest "$asan_dir" --no-rebuild --print-errorlogs --timeout-multiplier 4 \
        frame handshake acceptor tcp-connection config record executor \
        fault-matrix fault-matrix-tcp comm-lifecycle streams api-arguments transport-contract \
        'hora-soak chaos-shrink'
      # faults and faults-tcp, but for the case whose rank lowers its descriptor limit until its
      # data socket cannot be opened: UBSan asks whether memory is readable by writing it into a
      # pipe (sanitizer_common's IsAccessibleMemoryRange), which fails there, so every vptr check
      # in that rank reports an "invalid vptr" ("memory cannot be printed"). A limit of the
      # sanitizer, not a wrong type: the case runs in the normal build.
      step "asan tests (faults)" mtest "$asan_dir" --no-rebuild --print-errorlogs --timeout-multiplier 4 \
        faults faults-tcp --test-args "'~a rank that fails during init makes every rank fail at once'"  # meson splits it as a shell would
      ;;
    tsan)
      step "tsan build" build "$tsan_dir" thread \
        tests/test_collectives tests/test_streams tests/test_comm_lifecycle tests/test_executor tests/test_log \
        tests/test_faults tests/test_api_args perf/hora-soak tools/hora-run
      # Of the collectives as threads, all but the sweeps over every count and type (the same
      # code, many more times: half an hour under TSan).
      step "tsan tests (collectives as threads)" mtest "$tsan_dir" --no-rebuild --print-errorlogs \
        --timeout-multiplier 8 collectives-threads --test-args '[group],[p2p],[split],[barrier]'
      step "tsan tests" mtest "$tsan_dir" --no-rebuild --print-errorlogs --timeout-multiplier 8 \
        streams comm-lifecycle executor log api-arguments 'hora-soak threads' 'hora-soak chaos'
      # faults, but for the case that stops rank 0 once /proc shows it blocked in its call: under
      # TSan the ranks' timing differs so much that the case's controller waits out its bounds
      # (minutes) instead of catching that moment; it runs in the normal build and under ASan.
      step "tsan tests (faults)" mtest "$tsan_dir" --no-rebuild --print-errorlogs --timeout-multiplier 8 \
        faults --test-args "'~a same-host peer that failed and exited: its published cause wins over its exit'"
      ;;
    *)
      echo "usage: $0 [asan] [tsan]" >&2
      exit 2
      ;;
  esac
done
