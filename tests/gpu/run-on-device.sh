#!/usr/bin/env bash
# Builds Hora with CUDA for this machine's GPU and runs everything that needs one, in one command:
#   - the gpu suite (meson test --suite gpu): every collective with device buffers at 1 to 8
#     ranks, in and out of place, exact against the host reference, through the CUDA IPC stage
#     and bounced through host memory; stream order (kernels writing the input just before the
#     call and reading the result just after, on the same stream; a group over two streams); a
#     rank killed mid-call; ranks as threads of one process on one GPU; the CUDA kernels against
#     the CPU kernels, aligned and not, on random data and (test_kernels_cuda) on special values;
#   - the device-initiated kernels under compute-sanitizer (memcheck, racecheck);
#   - perf/kernel_perf: the reduce and reduce-copy kernels against cudaMemcpy device to device;
#   - allreduce_perf -M device with 2 ranks as threads of one GPU, as kernels and through the
#     worker (HORA_CUDA_KERNELS=0), and with 1 rank;
#   - allreduce_perf -M device between 2 ranks of one GPU, through CUDA IPC and bounced
#     (HORA_CUDA_IPC=0); a bounced 64 MiB call (chunk by chunk, and whole) beside the same call on
#     host buffers, between 2
#     ranks as threads (one CUDA context: bouncing's own cost) and between 2 processes over shared
#     memory and over TCP; and the other tools with device buffers at 4 ranks.
# GPU_STEP_FILTER, GPU_STEP_DONE and GPU_DEADLINE choose the steps and bound them
# (tests/gpu/step-control.sh; tests/gpu/device-checks.sh runs this script's steps that way).
# Results go to $OUT (or build-gpu/out): gpu-tests.log, kernel_perf.txt, device_perf.txt.
#
#   tests/gpu/run-on-device.sh               build and run (on the machine with the GPU)
#   tests/gpu/run-on-device.sh --fetch-deps  on a Debian machine with apt: download the Debian
#                                            packages the build needs into tests/gpu/.deps, for a
#                                            GPU machine that has CUDA, meson and ninja but no
#                                            network; the run unpacks them where pkg-config lacks them
#   tests/gpu/run-on-device.sh --pack        build build-gpu here (with nvcc, no GPU needed) and copy
#                                            the shared libraries it needs into tests/gpu/.libs, so
#                                            that build-gpu and tests/gpu/.libs can be carried to a
#                                            GPU machine that has none of the build dependencies
#   tests/gpu/run-on-device.sh --prebuilt    run a carried build (no meson, no ninja: the tests'
#                                            executables are run directly): build-gpu-pack, which
#                                            --pack fills with just what this script runs (about
#                                            20 MB: build-gpu is over 200 MB, more than a device call
#                                            carries), else build-gpu
#
# The device call (the tool `run`), after --pack here (with tests/gpu/run-torch-gpu.sh --pack, the
# two fit one call):
#   command: tests/gpu/run-on-device.sh --prebuilt; tests/gpu/run-torch-gpu.sh --prebuilt
#   carry:   ["build-gpu-pack", "build-torch-gpu", "tests/gpu/.libs"]
#
# GPU_ARCHS (default: this GPU's, from nvidia-smi, else 90) picks what nvcc compiles for.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
deps=$root/tests/gpu/.deps
if [[ ${1:-} == --fetch-deps ]]; then
  mkdir -p "$deps"
  cd "$deps"
  apt-get download libsodium23 libsodium-dev libhwloc15 libhwloc-dev catch2 libudev1
  ls -l "$deps"
  exit 0
fi
if [[ ${1:-} == --pack ]]; then
  cd "$root"
  nvcc=${NVCC:-/usr/local/cuda/bin/nvcc}
  [ -d build-gpu ] || meson setup build-gpu -Dcuda=enabled -Dcudatoolkit="$(dirname "$(dirname "$nvcc")")" \
    -Dgpu_archs="${GPU_ARCHS:-90}" -Dib=disabled -Dfuzz=disabled -Dmpi=disabled
  ninja -C build-gpu
  mkdir -p tests/gpu/.libs/fallback
  # What the system of the GPU machine may lack: the build's own dependencies, and (only where
  # this machine's newer C++ runtime is missing there) libstdc++.
  mkdir -p tests/gpu/.libs/udev
  for l in libsodium.so.23 libhwloc.so.15; do
    cp -L "$(ldd build-gpu/libhora.so | awk -v l=$l '$1 == l { print $3 }')" tests/gpu/.libs/
  done
  cp -L "$(ldd build-gpu/libhora.so | awk '$1 == "libudev.so.1" { print $3 }')" tests/gpu/.libs/udev/
  for l in libstdc++.so.6 libgcc_s.so.1; do
    cp -L "$(ldd build-gpu/libhora.so | awk -v l=$l '$1 == l { print $3 }')" tests/gpu/.libs/fallback/
  done
  # What --prebuilt runs, in build-gpu's layout (the executables find libhora.so.0 at $ORIGIN/..).
  rm -rf build-gpu-pack
  mkdir -p build-gpu-pack/tests build-gpu-pack/perf build-gpu-pack/tools
  cp -L build-gpu/libhora.so.0 build-gpu-pack/
  cp build-gpu/tests/test_device build-gpu/tests/test_kernels_cuda build-gpu-pack/tests/
  cp build-gpu/tools/hora-run build-gpu-pack/tools/
  for t in kernel allreduce broadcast reduce allgather reducescatter sendrecv; do
    cp build-gpu/perf/${t}_perf build-gpu-pack/perf/
  done
  du -sh build-gpu build-gpu-pack tests/gpu/.libs
  exit 0
fi
prebuilt=0
[[ ${1:-} == --prebuilt ]] && prebuilt=1
cd "$root"
b=build-gpu
((prebuilt)) && [ -e build-gpu-pack/libhora.so.0 ] && b=build-gpu-pack
out=${OUT:-$root/$b/out}
mkdir -p "$out"
log() { echo "== $*" | tee -a "$out/summary.txt"; }
: >"$out/summary.txt"

# What the build needs, from the carried packages where the system lacks it.
if ((prebuilt)); then
  libs=$root/tests/gpu/.libs
  ldconfig -p | grep -q 'libudev.so.1 ' || export LD_LIBRARY_PATH=$libs/udev${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  export LD_LIBRARY_PATH=$libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  if ldd $b/tests/test_device $b/libhora.so.0 | grep -q 'not found'; then
    export LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$libs/fallback
    log "this system's C++ runtime is too old for the build: using the carried one"
  fi
elif ! pkg-config --exists libsodium hwloc catch2 2>/dev/null; then
  if ls "$deps"/*.deb >/dev/null 2>&1; then
    sysroot=/tmp/hora-deps
    mkdir -p "$sysroot"
    for f in "$deps"/*.deb; do dpkg-deb -x "$f" "$sysroot"; done
    export PKG_CONFIG_SYSROOT_DIR=$sysroot
    export PKG_CONFIG_PATH=$sysroot/usr/lib/x86_64-linux-gnu/pkgconfig:$sysroot/usr/share/pkgconfig
    export LD_LIBRARY_PATH=$sysroot/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    export LIBRARY_PATH=$sysroot/usr/lib/x86_64-linux-gnu
    log "build dependencies from $deps (unpacked into $sysroot)"
  else
    log "pkg-config finds no libsodium, hwloc or catch2, and $deps has no packages (run --fetch-deps where apt works)"
    exit 1
  fi
fi
log "GPU: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || echo '?')"
if ((!prebuilt)); then
  nvcc=${NVCC:-/usr/local/cuda/bin/nvcc}
  [ -x "$nvcc" ] || nvcc=$(command -v nvcc)
  if [ -z "${GPU_ARCHS:-}" ]; then
    cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d '. ')
    GPU_ARCHS=${cc:-90}
  fi
  log "nvcc: $("$nvcc" --version | tail -1); archs: $GPU_ARCHS"
  cuda_root=$(dirname "$(dirname "$nvcc")")
  if [ ! -d build-gpu ]; then
    meson setup build-gpu -Dcuda=enabled -Dcudatoolkit="$cuda_root" -Dgpu_archs="$GPU_ARCHS" \
      -Dib=disabled -Dfuzz=disabled -Dmpi=disabled >"$out/setup.log" 2>&1 || { tail -30 "$out/setup.log"; exit 1; }
  fi
  ninja -C build-gpu >"$out/build.log" 2>&1 || { tail -40 "$out/build.log"; exit 1; }
  log "built"
fi

# Each step has a limit of its own (STEP_LIMIT seconds, 240 by default), so that one hang still
# leaves the others' results; HORA_TIMEOUT_MS turns a stuck collective into an error first.
export HORA_TIMEOUT_MS=${HORA_TIMEOUT_MS:-30000}
limit=${STEP_LIMIT:-240}
rc=0
set -o pipefail
# shellcheck source=tests/gpu/step-control.sh
. "$root/tests/gpu/step-control.sh"
step() {  # step NAME LOGFILE COMMAND...: run it under the limit, tee its output, note the outcome
  local name=$1 file=$2; shift 2
  gpu_step_wanted "$name" || return 0
  local t0=$SECONDS r=0 lim
  lim=$(gpu_step_limit "$limit")
  if ((lim == 0)); then log "$name: SKIPPED (GPU_DEADLINE)"; rc=1; return 0; fi
  echo "==== $name: $*" >>"$out/$file"
  timeout -k 5 "$lim" "$@" 2>&1 | tee -a "$out/$file" || r=$?
  gpu_step_ran "$name"
  log "$name: rc=$r in $((SECONDS - t0)) s"
  ((r == 0)) || rc=1
}
log "gpu suite"
step "gpu-device" gpu-tests.log $b/tests/test_device
step "gpu-device-bounced" gpu-tests.log env HORA_CUDA_IPC=0 $b/tests/test_device '[sweep]'
step "gpu-device-worker" gpu-tests.log env HORA_CUDA_KERNELS=0 $b/tests/test_device '[sweep]'
# The device-initiated kernels under compute-sanitizer: LL and chunked calls, captured and
# replayed, at 2 and 3 ranks (every process followed).
if command -v compute-sanitizer >/dev/null || [ -x /usr/local/cuda/bin/compute-sanitizer ]; then
  cs=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
  for tool in memcheck racecheck; do
    step "compute-sanitizer $tool" gpu-sanitizer.log "$cs" --tool $tool --target-processes all --error-exitcode 9 \
      $b/tests/test_device '[graph],[group]'
  done
fi
step "gpu-kernels-special-values" gpu-tests.log $b/tests/test_kernels_cuda '[gpu]'
step "kernel_perf" kernel_perf.txt $b/perf/kernel_perf -b 256M -n 20
run=$b/tools/hora-run
# The device-initiated kernels against the worker's hand-off, 2 ranks as threads on one GPU (the
# 8-byte time per call, and the rate at 256 MiB), and 1 rank.
step "allreduce 2 ranks as threads, kernels" device_perf.txt \
  $b/perf/allreduce_perf -N 2 -M device -b 8 -e 256M -f 4 -n 50 -w 10
step "allreduce 2 ranks as threads, worker (HORA_CUDA_KERNELS=0)" device_perf.txt \
  env HORA_CUDA_KERNELS=0 $b/perf/allreduce_perf -N 2 -M device -b 8 -e 256M -f 4 -n 50 -w 10
step "allreduce 1 rank, kernels" device_perf.txt $b/perf/allreduce_perf -M device -b 8 -e 256M -f 4 -n 50 -w 10
# A group of 4 AllReduces per iteration as one launch (gpu::Batch), per call, against the lone calls above.
step "allreduce 2 ranks as threads, groups of 4 (one kernel each)" device_perf.txt \
  $b/perf/allreduce_perf -N 2 -M device -b 8 -e 1M -f 32 -m 4 -n 50 -w 10
step "allreduce 2 ranks, CUDA IPC" device_perf.txt \
  "$run" -n 2 $b/perf/allreduce_perf -M device -b 1M -e 256M -f 4 -n 20 -w 5
step "allreduce 2 ranks, bounced (HORA_CUDA_IPC=0)" device_perf.txt \
  env HORA_CUDA_IPC=0 "$run" -n 2 $b/perf/allreduce_perf -M device -b 1M -e 256M -f 4 -n 20 -w 5
# A bounced call on device buffers (through host memory: HORA_CUDA_IPC=0) against the same call on
# host buffers at 64 MiB: first 2 ranks as threads (one CUDA context, so no time slices between
# processes: what bouncing itself costs), then 2 processes over shared memory and over TCP.
step "bounced 64 MiB, threads, host buffers" device_perf.txt \
  $b/perf/allreduce_perf -N 2 -M host -b 64M -e 64M -n 20 -w 5
step "bounced 64 MiB, threads, device buffers" device_perf.txt \
  env HORA_CUDA_KERNELS=0 HORA_CUDA_IPC=0 $b/perf/allreduce_perf -N 2 -M device -b 64M -e 64M -n 20 -w 5
# The same, each buffer copied whole (in, the call, out: the previous design), against the chunks.
step "bounced 64 MiB, threads, device buffers, whole (HORA_CUDA_BOUNCE_CHUNK=0)" device_perf.txt \
  env HORA_CUDA_KERNELS=0 HORA_CUDA_IPC=0 HORA_CUDA_BOUNCE_CHUNK=0 $b/perf/allreduce_perf -N 2 -M device -b 64M -e 64M -n 20 -w 5
for tr in shm tcp; do
  step "bounced 64 MiB, host buffers, $tr" device_perf.txt env HORA_TRANSPORTS=$tr \
    "$run" -n 2 $b/perf/allreduce_perf -M host -b 64M -e 64M -n 20 -w 5
  step "bounced 64 MiB, device buffers, $tr" device_perf.txt env HORA_TRANSPORTS=$tr HORA_CUDA_IPC=0 \
    "$run" -n 2 $b/perf/allreduce_perf -M device -b 64M -e 64M -n 20 -w 5
  step "bounced 64 MiB, device buffers, $tr, whole" device_perf.txt env HORA_TRANSPORTS=$tr HORA_CUDA_IPC=0 \
    HORA_CUDA_BOUNCE_CHUNK=0 "$run" -n 2 $b/perf/allreduce_perf -M device -b 64M -e 64M -n 20 -w 5
done
for t in allreduce broadcast reduce allgather reducescatter sendrecv; do
  step "${t}_perf 4 ranks" device_perf.txt "$run" -n 4 $b/perf/${t}_perf -M device -b 8 -e 64M -f 16 -n 5 -w 2
done
log "done, rc=$rc"
exit $rc
