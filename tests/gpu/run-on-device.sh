#!/usr/bin/env bash
# Builds Hora with CUDA for this machine's GPU and runs everything that needs one, in one command:
#   - the gpu suite (meson test --suite gpu): every collective with device buffers at 1 to 8
#     ranks, in and out of place, exact against the host reference, through the CUDA IPC stage
#     and staged through host memory; stream order (kernels writing the input just before the
#     call and reading the result just after, on the same stream; a group over two streams); a
#     rank killed mid-call; ranks as threads of one process on one GPU; the CUDA kernels against
#     the CPU kernels, aligned and not;
#   - perf/kernel_perf: the reduce and reduce-copy kernels against cudaMemcpy device to device;
#   - allreduce_perf -M device between 2 ranks of one GPU, through CUDA IPC and staged
#     (HORA_CUDA_IPC=0), and the other tools with device buffers at 4 ranks.
# Results go to $OUT (or build-gpu/out): gpu-tests.log, kernel_perf.txt, device_perf.txt.
#
#   tests/gpu/run-on-device.sh               build and run (on the machine with the GPU)
#   tests/gpu/run-on-device.sh --fetch-deps  on a Debian machine with apt: download the Debian
#                                            packages the build needs into tests/gpu/.deps, for a
#                                            GPU machine that has CUDA, meson and ninja but no
#                                            network; the run unpacks them where pkg-config lacks them
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
cd "$root"
out=${OUT:-$root/build-gpu/out}
mkdir -p "$out"
log() { echo "== $*" | tee -a "$out/summary.txt"; }
: >"$out/summary.txt"

# What the build needs, from the carried packages where the system lacks it.
if ! pkg-config --exists libsodium hwloc catch2 2>/dev/null; then
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
nvcc=${NVCC:-/usr/local/cuda/bin/nvcc}
[ -x "$nvcc" ] || nvcc=$(command -v nvcc)
if [ -z "${GPU_ARCHS:-}" ]; then
  cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d '. ')
  GPU_ARCHS=${cc:-90}
fi
log "GPU: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || echo '?'); nvcc: $("$nvcc" --version | tail -1); archs: $GPU_ARCHS"
cuda_root=$(dirname "$(dirname "$nvcc")")
if [ ! -d build-gpu ]; then
  meson setup build-gpu -Dcuda=enabled -Dcudatoolkit="$cuda_root" -Dgpu_archs="$GPU_ARCHS" \
    -Dib=disabled -Dfuzz=disabled -Dmpi=disabled >"$out/setup.log" 2>&1 || { tail -30 "$out/setup.log"; exit 1; }
fi
ninja -C build-gpu >"$out/build.log" 2>&1 || { tail -40 "$out/build.log"; exit 1; }
log "built"

rc=0
set -o pipefail
log "gpu suite"
meson test -C build-gpu --suite gpu --print-errorlogs --num-processes 1 2>&1 | tee "$out/gpu-tests.log" || rc=1
log "kernel_perf"
build-gpu/perf/kernel_perf -b 256M -n 20 2>&1 | tee "$out/kernel_perf.txt" || rc=1
run=build-gpu/tools/hora-run
{
  echo "# allreduce_perf -M device, 2 ranks on one GPU, through CUDA IPC"
  "$run" -n 2 build-gpu/perf/allreduce_perf -M device -b 1M -e 256M -f 4 -n 20 -w 5
  echo "# the same, staged through host memory (HORA_CUDA_IPC=0)"
  HORA_CUDA_IPC=0 "$run" -n 2 build-gpu/perf/allreduce_perf -M device -b 1M -e 256M -f 4 -n 20 -w 5
  for t in allreduce broadcast reduce allgather reducescatter sendrecv; do
    echo "# ${t}_perf -M device, 4 ranks on one GPU"
    "$run" -n 4 build-gpu/perf/${t}_perf -M device -b 8 -e 64M -f 16 -n 5 -w 2
  done
} 2>&1 | tee "$out/device_perf.txt" || rc=1
log "done, rc=$rc"
exit $rc
