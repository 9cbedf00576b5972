#!/usr/bin/env bash
# PyTorch on a GPU through Hora's Python layer, on a machine with one GPU, in one command:
#   distributed-device  tests/python/test_distributed_device.py with TEST_DEVICE=cuda: the
#                       torch.distributed backend "hora" on CUDA tensors at 2 and 3 ranks on the one
#                       GPU, each collective's values, the caller's stream order proven with gates
#   torch-device        tests/python/test_torch_device.py likewise (the Horovod API on CUDA tensors)
#   device-buffers      tests/python/test_device_buffers.py (objects with __cuda_array_interface__)
#   examples            the Horovod-API example trained one epoch at 1 and 2 ranks, on the CPU and
#                       on the GPU: same accuracy (tests/gpu/torch_gpu_check.py)
#   ddp                 DDP on the "hora" backend, 2 ranks, CPU against GPU, likewise
#   torch-suite         PyTorch's own _DistTestBase on "hora" where a GPU changes what runs
#                       (tests/python/torch_dist_suite.py, when present), under its own limit
#
#   tests/gpu/run-torch-gpu.sh --pack      here, no GPU needed, after tests/gpu/run-on-device.sh --pack
#                                          (build-gpu and tests/gpu/.libs): gathers libhora.so.0,
#                                          hora-run and a Fashion-MNIST subset (12000 training and
#                                          2000 test images, so that it fits the carry) into
#                                          build-torch-gpu/
#   tests/gpu/run-torch-gpu.sh --prebuilt  on the GPU machine: runs the steps from that (no compiler)
#
# The device call (the tool `run`):
#   command: tests/gpu/run-torch-gpu.sh --prebuilt
#   carry:   ["build-torch-gpu", "tests/gpu/.libs"]       (about 15 MB)
#   timeout_s: 600 (the steps keep to TORCH_GPU_BUDGET, 540 s by default)
# Outputs in $OUT (else build-torch-gpu-out): summary.txt (each step: outcome and seconds),
# steps.log (every step's output), env.txt. The exit status is 1 if any step failed.
# GPU_STEP_FILTER, GPU_STEP_DONE and GPU_DEADLINE choose the steps and bound them
# (tests/gpu/step-control.sh; tests/gpu/device-checks.sh runs this script's steps that way).
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
# shellcheck source=tests/gpu/step-control.sh
. "$root/tests/gpu/step-control.sh"
pack=${TORCH_GPU_PACK:-$root/build-torch-gpu}

die() { echo "run-torch-gpu: $*" >&2; exit 1; }

do_pack() {
  cd "$root" || exit 1
  [ -e build-gpu/libhora.so.0 ] && [ -x build-gpu/tools/hora-run ] ||
    die "no build-gpu/libhora.so.0 or build-gpu/tools/hora-run: run tests/gpu/run-on-device.sh --pack first"
  [ -d tests/gpu/.libs ] || die "no tests/gpu/.libs: run tests/gpu/run-on-device.sh --pack first"
  rm -rf "$pack"
  mkdir -p "$pack/tools" "$pack/data"
  cp -L build-gpu/libhora.so.0 "$pack/libhora.so.0"
  cp build-gpu/tools/hora-run "$pack/tools/hora-run"  # (RUNPATH $ORIGIN/..: finds libhora.so.0)
  local data=${FASHION_MNIST_DIR:-/usr/share/datasets/fashion-mnist}
  /usr/bin/python3 - "$data" "$pack/data" <<'EOF' || die "no Fashion-MNIST subset (FASHION_MNIST_DIR)"
import gzip, os, sys
import numpy as np
sys.path.insert(0, os.path.join(os.getcwd(), "examples"))
import fashion_mnist
src, dst = sys.argv[1], sys.argv[2]
for train, n in ((True, 12000), (False, 2000)):
    images, labels = fashion_mnist.load(src, train)
    prefix = "train" if train else "t10k"
    for stem, a in (("-images-idx3-ubyte", images[:n]), ("-labels-idx1-ubyte", labels[:n])):
        header = bytes([0, 0, 0x08, a.ndim]) + np.array(a.shape, dtype=">u4").tobytes()
        with gzip.open(os.path.join(dst, prefix + stem + ".gz"), "wb") as f:
            f.write(header + np.ascontiguousarray(a, dtype=np.uint8).tobytes())
print("Fashion-MNIST subset: 12000 training and 2000 test images")
EOF
  (cd "$pack" && find . -type f | sort | xargs sha256sum) >"$pack/MANIFEST"
  LD_LIBRARY_PATH=$pack "$pack/tools/hora-run" --help >/dev/null 2>&1 || die "the packed hora-run does not run"
  echo "packed into $pack ($(du -sh "$pack" | cut -f1)); carry [\"build-torch-gpu\", \"tests/gpu/.libs\"]"
}

do_prebuilt() {
  cd "$root" || exit 1
  [ -e "$pack/libhora.so.0" ] || die "no $pack: run --pack here first and carry build-torch-gpu"
  local out=${OUT:-$root/build-torch-gpu-out}
  mkdir -p "$out"
  local tsv=$out/summary.txt budget=${TORCH_GPU_BUDGET:-540} start=$SECONDS failed=0
  : >"$tsv"
  : >"$out/steps.log"
  local libs=$root/tests/gpu/.libs ld=$pack:$root/tests/gpu/.libs
  ldconfig -p 2>/dev/null | grep -q 'libudev.so.1 ' || ld=$ld:$libs/udev
  if LD_LIBRARY_PATH=$ld ldd "$pack/libhora.so.0" | grep -q 'not found'; then ld=$ld:$libs/fallback; fi
  export LD_LIBRARY_PATH=$ld${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  export HORA_LIBRARY=$pack/libhora.so.0 HORA_RUN=$pack/tools/hora-run PYTHONPATH=$root/python
  export HORA_TIMEOUT_MS=${HORA_TIMEOUT_MS:-60000} PYTHONUNBUFFERED=1
  local py=${PYTHON:-python3}
  {
    echo "date: $(date -u)"; nvidia-smi -L 2>&1 | head -4
    echo "python: $(command -v "$py") $("$py" --version 2>&1)"
    "$py" -c 'import torch; print("torch", torch.__version__, "CUDA", torch.version.cuda, "available", torch.cuda.is_available())' 2>&1 | tail -1
    "$py" -c 'import hora._core as c; print("libhora", c.version())' 2>&1 | tail -1
  } >"$out/env.txt"
  cat "$out/env.txt"

  step() {
    local name=$1 limit=$2
    shift 2
    gpu_step_wanted "$name" || return 0
    local left=$((budget - (SECONDS - start)))
    ((limit <= left)) || limit=$left
    limit=$(gpu_step_limit "$limit")
    if ((left < 20 || limit == 0)); then
      printf '%s\tskip\t0\n' "$name" >>"$tsv"; echo "$name: SKIPPED (budget or GPU_DEADLINE spent)"
      failed=$((failed + 1)); return 1
    fi
    gpu_step_ran "$name"
    local t0=$SECONDS r=0
    { echo "==== $name: $*"; timeout -k 5 "$limit" "$@" 2>&1; } >>"$out/steps.log" || r=$?
    printf '%s\t%s\t%s\n' "$name" "$r" "$((SECONDS - t0))" >>"$tsv"
    ((r == 0)) || failed=$((failed + 1))
    echo "$name: $([ "$r" = 0 ] && echo PASS || echo "FAIL rc=$r") in $((SECONDS - t0)) s"
  }
  # (HARNESS_TIMEOUT: each rank count's run stops, and reports what its ranks printed, before the
  # step's limit would cut the whole test off silently)
  step distributed-device 120 env TEST_DEVICE=cuda HARNESS_TIMEOUT=50 "$py" tests/python/test_distributed_device.py
  [ -f tests/python/test_torch_device.py ] &&
    step torch-device 150 env TEST_DEVICE=cuda HARNESS_TIMEOUT=45 "$py" tests/python/test_torch_device.py
  step device-buffers 60 env TEST_DEVICE=cuda HARNESS_TIMEOUT=25 "$py" tests/python/test_device_buffers.py
  step examples 200 "$py" tests/gpu/torch_gpu_check.py examples --data-dir "$pack/data"
  step ddp 120 "$py" tests/gpu/torch_gpu_check.py ddp --data-dir "$pack/data"
  [ -f tests/python/torch_dist_suite.py ] &&
    step torch-suite 240 "$py" tests/python/torch_dist_suite.py --world-sizes 2 --start fork --gloo
  grep -h "^ranks\|accuracy\|GPU " "$out/steps.log" | tail -20
  echo "== $failed step(s) failed"; cat "$tsv"
  ((failed == 0))
}

case "${1:-}" in
  --pack) do_pack ;;
  --prebuilt) do_prebuilt ;;
  *) sed -n '2,26p' "$0"; exit 2 ;;
esac
