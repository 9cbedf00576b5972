#!/usr/bin/env bash
# Every check that needs a GPU, in one order of importance, within one device call (or two on the
# same warm machine): the steps of tests/gpu/run-on-device.sh (the gpu suite, the kernels, the
# device collectives' figures), tests/gpu/run-nccl-clients.sh (nccl-tests and PyTorch's
# ProcessGroupNCCL on Hora's libnccl.so.2, beside NVIDIA's NCCL) and tests/gpu/run-torch-gpu.sh
# (PyTorch on CUDA tensors through Hora's Python layer), run as phases that each pick some steps
# of one script (GPU_STEP_FILTER, tests/gpu/step-control.sh):
#   core      the gpu suite, AllReduce as kernels with 2 ranks as threads of the GPU and with 1
#             rank, the worker's hand-off beside them, a bounced 64 MiB call beside host buffers
#   nccl      which nccl symbols torch imports, nccl-tests' all_reduce at 1 and 2 ranks (to 256 MiB)
#             on Hora and on NVIDIA's NCCL, torch's ProcessGroupNCCL on Hora
#   torch     the "hora" backend's device tests, the buffer calls on CUDA, DDP on the GPU
#   nccl-more nccl-tests' other collectives at 1 and 2 ranks on Hora
#   core-more compute-sanitizer memcheck, the CUDA kernels on special values, kernel_perf (both
#             measured on an H200 on 2026-11-27), 2 processes through CUDA IPC and bounced
#   torch-more the Horovod API's device test, the examples trained on the GPU
#   rest      everything left of the three scripts (4-rank nccl-tests, NVIDIA's other collectives,
#             racecheck, the tools at 4 ranks, PyTorch's own suite)
# All phases share one deadline (DEVICE_BUDGET seconds from the start, 520 by default): a step
# that would start with under 20 s left is skipped and left for the next call. Steps run are
# noted in /tmp/hora-device-checks/done, so the same command on the same warm machine (within its
# 30 s) goes on where the last one stopped.
#
#   tests/gpu/device-checks.sh --pack       here (nvcc, no GPU): the three scripts' --pack, and the
#                                           size of what the call carries
#   tests/gpu/device-checks.sh --prebuilt [PHASE...]   there: the phases given (default: all, in
#                                           the order above); a phase may also be written
#                                           NAME=SCRIPT:REGEX (the steps of SCRIPT matching REGEX)
#
# The device call (the tool `run`):
#   command: tests/gpu/device-checks.sh --prebuilt
#   carry:   ["build-device-checks"]   (the packs in one archive, unpacked there first)
#   timeout_s: 590
# What comes back in $OUT (at most 8 files): summary.txt (every step's outcome, phase by phase),
# device_perf.txt, kernel_perf.txt, nccl-tests-summary.txt and logs.tgz (each phase's whole output),
# rewritten after each phase so that a call cut short still returns what ran.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
here=$root/tests/gpu

if [[ ${1:-} == --pack ]]; then
  set -e
  "$here/run-on-device.sh" --pack
  "$here/run-nccl-clients.sh" --pack
  "$here/run-torch-gpu.sh" --pack
  cd "$root"
  # One copy of libhora.so.0 (the other packs link to build-gpu-pack's), and all of it in one xz
  # archive: 110 MB of executables, most of it CUDA fat binaries, carry as about 15 MB.
  ln -sf ../../build-gpu-pack/libhora.so.0 build-nccl-clients/hora/libhora.so.0
  ln -sf ../build-gpu-pack/libhora.so.0 build-torch-gpu/libhora.so.0
  mkdir -p build-device-checks
  tar -cf - build-gpu-pack build-nccl-clients build-torch-gpu tests/gpu/.libs | xz -6 -T0 >build-device-checks/pack.tar.xz
  echo "== carried: build-device-checks/pack.tar.xz, $(stat -c %s build-device-checks/pack.tar.xz) bytes;" \
    "working tree $(git ls-files -co --exclude-standard -z | du -cb --files0-from=- 2>/dev/null | tail -1 | cut -f1) bytes (64 MiB at most together)"
  exit 0
fi
[[ ${1:-} == --prebuilt ]] || { sed -n '2,/^set -uo/p' "$0" | sed '$d'; exit 2; }
shift
phases=("$@")
if [ -f "$root/build-device-checks/pack.tar.xz" ]; then
  (cd "$root" && xz -dc build-device-checks/pack.tar.xz | tar -x) ||
    { echo "device-checks: build-device-checks/pack.tar.xz does not unpack" >&2; exit 1; }
fi
[ -e "$root/build-gpu-pack/libhora.so.0" ] && [ -e "$root/build-torch-gpu/libhora.so.0" ] &&
  [ -e "$root/build-nccl-clients/hora/libhora.so.0" ] ||
  { echo "device-checks: no packs here: run --pack where nvcc is, and carry build-device-checks" >&2; exit 1; }
((${#phases[@]})) || phases=(core nccl torch nccl-more core-more torch-more rest)

work=/tmp/hora-device-checks
mkdir -p "$work"
out=${OUT:-$root/device-checks-out}
mkdir -p "$out"
export GPU_STEP_DONE=$work/done GPU_DEADLINE=$(($(date +%s) + ${DEVICE_BUDGET:-520}))
export HORA_TIMEOUT_MS=${HORA_TIMEOUT_MS:-30000} PYTHONUNBUFFERED=1
# The flight recorder's dumps of failed or stopped ranks, into the logs that come back.
export HORA_DUMP_DIR=$work/dumps
mkdir -p "$HORA_DUMP_DIR"
# each script's own budget is the deadline's
export NCCL_CLIENTS_BUDGET=${DEVICE_BUDGET:-520} TORCH_GPU_BUDGET=${DEVICE_BUDGET:-520}

collect() {  # $OUT from what every phase so far wrote (kept under 8 files)
  : >"$out/summary.txt"
  : >"$out/device_perf.txt"
  : >"$out/nccl-tests-summary.txt"
  local d
  for d in "$work"/[0-9]*; do
    [ -d "$d" ] || continue
    { echo "#### $(basename "$d")"; cat "$d"/summary.txt 2>/dev/null; cat "$d"/phase.txt 2>/dev/null; } >>"$out/summary.txt"
    [ -f "$d/device_perf.txt" ] && cat "$d/device_perf.txt" >>"$out/device_perf.txt"
    [ -f "$d/kernel_perf.txt" ] && cp "$d/kernel_perf.txt" "$out/kernel_perf.txt"
    [ -f "$d/nccl-tests-summary.txt" ] &&
      { echo "#### $(basename "$d")"; cat "$d/nccl-tests-summary.txt"; } >>"$out/nccl-tests-summary.txt"
  done
  tar -czf "$out/logs.tgz" -C "$work" . 2>/dev/null
}

n=$(find "$work" -maxdepth 1 -name '[0-9]*' -type d | wc -l)
failed=0
run_phase() {  # run_phase NAME SCRIPT FILTER [ENV...]
  local name=$1 script=$2 filter=$3
  shift 3
  n=$((n + 1))
  local d=$work/$(printf '%02d' $n)-$name t0=$SECONDS r=0
  mkdir -p "$d"
  echo "######## $name ($script, steps matching '$filter'), $((GPU_DEADLINE - $(date +%s))) s left"
  env GPU_STEP_FILTER="$filter" OUT="$d" "$@" "$here/$script" --prebuilt >"$d/output.txt" 2>&1 || r=$?
  ((r == 0)) || failed=$((failed + 1))
  echo "phase $name: rc=$r in $((SECONDS - t0)) s" | tee "$d/phase.txt"
  grep -E 'rc=|PASS|FAIL|SKIP' "$d/summary.txt" 2>/dev/null | sed 's/^/   /'
  collect
}

for p in "${phases[@]}"; do
  case $p in
    core) run_phase core run-on-device.sh \
      '^(gpu-device|allreduce 2 ranks as threads, .*|allreduce 1 rank, kernels|bounced 64 MiB, .*)$' ;;
    nccl) run_phase nccl run-nccl-clients.sh '^(torch-symbols|nt-(hora|nvidia)-all_reduce-t[12]|torch-hora(-stubs)?)$' \
      NT_ARGS_all_reduce="-b 8 -e 256M -f 4 -c 1 -n 20 -w 5" ;;
    torch) run_phase torch run-torch-gpu.sh '^(distributed-device|device-buffers|ddp)$' ;;
    nccl-more) run_phase nccl-more run-nccl-clients.sh '^nt-hora-.*-t[12]$' ;;
    core-more) run_phase core-more run-on-device.sh \
      '^(compute-sanitizer memcheck|gpu-kernels-special-values|kernel_perf|allreduce 2 ranks, .*)$' ;;
    torch-more) run_phase torch-more run-torch-gpu.sh '^(torch-device|examples)$' ;;
    rest)
      run_phase nccl-rest run-nccl-clients.sh '.'
      run_phase core-rest run-on-device.sh '.'
      run_phase torch-rest run-torch-gpu.sh '.' ;;
    *=*:*)
      name=${p%%=*} rest=${p#*=}
      run_phase "$name" "${rest%%:*}" "${rest#*:}" ;;
    *) echo "unknown phase $p" >&2; exit 2 ;;
  esac
done
echo
cat "$out/summary.txt"
echo "== $failed phase(s) failed; steps run so far: $(wc -l <"$GPU_STEP_DONE" 2>/dev/null || echo 0)"
((failed == 0))
