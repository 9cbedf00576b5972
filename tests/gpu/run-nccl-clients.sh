#!/usr/bin/env bash
# NCCL's own clients on Hora's libnccl.so.2, on a machine with one GPU, in one command:
#   1. NVIDIA's nccl-tests, unchanged, built once against Hora's nccl.h and libnccl.so, run on Hora
#      and then, the same binaries, on NVIDIA's NCCL (the one PyTorch's wheel brought), switching
#      LD_LIBRARY_PATH: all_reduce, all_gather, broadcast, reduce_scatter, alltoall and sendrecv with
#      their own check (-c 1), 1, 2 and 4 ranks as threads on the one GPU on Hora (-t N -g 1), 1 rank
#      on NVIDIA's and, where NVIDIA's is 2.30 or later, 2 ranks with NCCL_MULTI_RANK_GPU_ENABLE=1;
#      a table of the results (tests/gpu/nccl_tests_summary.py): nccl-tests-summary.txt;
#   2. PyTorch's ProcessGroupNCCL on Hora: the nccl symbols torch's libraries import against those
#      Hora's libnccl.so.2 exports (torch-nccl-symbols.txt), then tests/gpu/nccl_torch_check.py with
#      LD_PRELOAD=Hora's libnccl.so.2: which library torch runs on, every collective and send/recv
#      with exact expected values at 1 and 2 processes on the one GPU, a DDP loop against the same
#      loop on gloo; and the same script on NVIDIA's NCCL as the reference (1 process; 1 and 2 from
#      NCCL 2.30 on).
#
#   tests/gpu/run-nccl-clients.sh --pack      here, no GPU needed (after tests/gpu/run-on-device.sh
#                                             --pack, which builds build-gpu and tests/gpu/.libs):
#                                             builds nccl-tests and gathers what the GPU machine needs
#                                             into build-nccl-clients/, and checks it as far as this
#                                             machine can (links, ldd, symbols, -h)
#   tests/gpu/run-nccl-clients.sh --prebuilt  on the GPU machine: runs all of the above from what
#                                             --pack gathered (no compiler, no network)
#
# The device call (the tool `run`), once --pack has run here:
#   command: tests/gpu/run-nccl-clients.sh --prebuilt
#   carry:   ["build-nccl-clients", "tests/gpu/.libs"]
#   timeout_s: 600 (the script keeps to NCCL_CLIENTS_BUDGET, 540 s by default)
# build-gpu itself is not carried (177 MiB with its tests, over the 64 MiB a call carries):
# build-nccl-clients/hora holds copies of build-gpu/libhora.so.0 and build-gpu/src/nccl/libnccl.so.2,
# in the same layout, so libnccl.so.2 finds libhora.so.0 through its RUNPATH ($ORIGIN/../..).
#
# --pack takes nccl-tests' source from a git directory, not the network: NCCL_TESTS_GIT (default
# /work/.mirror/NVIDIA+nccl-tests/repo, the search tool's snapshot of NVIDIA/nccl-tests), at
# NCCL_TESTS_REF (default HEAD), unpacked by git archive into build-gpu/nccl-tests/src (ignored by
# git, never committed). nccl-tests from 2.17 on includes nccl_device.h, NCCL's device API, for any
# NCCL 2.28 or later; Hora ships no device API, so its headers come from NVIDIA/nccl at the version
# Hora's nccl.h declares: NCCL_GIT (default /work/.mirror/NVIDIA+nccl/repo) at NCCL_DEVICE_REF
# (default v2.28.3-1), else $CUDA_HOME/include. They only let nccl-tests compile: the device API is
# used only with nccl-tests' -D, never given here, and its host functions (ncclDevCommCreate...) are
# weak symbols in nccl-tests. NCCL_TESTS_REF=v2.16.9 builds the last nccl-tests without it.
# The binaries are built for NCCL_TESTS_GENCODE (default sm_90: H100 and H200) against the shared
# CUDA runtime (carried: libcudart.so.13), so that tests/gpu/nccl_tests_one_gpu.c can be preloaded
# into them: nccl-tests puts rank i of a process on device i, and the shim folds every device onto
# the GPU there is (see that file).
#
# Outputs, in $OUT (else build-nccl-clients-out): summary.txt (each step: outcome and seconds),
# nccl-tests-summary.txt, torch-nccl-symbols.txt, env.txt, steps.log (every step's output, appended
# as it runs) and step-logs.tgz (one <step>.log per step). The device tool brings back at most 8
# files from $OUT, so the per-step logs are written beside the run (/tmp) and packed at the end,
# and steps.log holds them all should the run be cut off before that.
# Every step runs under its own limit (timeout), so that a hang costs that step alone; a step that
# would start with under 20 s of the budget left is skipped, said so and counted as failed. The
# exit status is 1 if any step failed (a nccl-tests run with #wrong or out-of-bounds values, a
# torch check, NVIDIA's reference runs included). The steps, most telling first: torch-symbols;
# nt-hora-<collective>-t1 and -t2; torch-hora (and, only if torch cannot even load on Hora for a
# symbol Hora lacks, torch-hora-stubs: the same with stubs for the missing symbols preloaded too);
# nt-hora-*-t4; nt-nvidia-*-t1 (and -t2 from NCCL 2.30); torch-nvidia.
# Knobs: NT_ARGS (nccl-tests' arguments, "-b 8 -e 64M -f 4 -c 1 -n 10 -w 2"), NT_STEP_LIMIT (60 s),
# TORCH_STEP_LIMIT (240 s), NCCL_CLIENTS_BUDGET (540 s), NVIDIA_NCCL_LIB (found beside torch),
# HORA_TIMEOUT_MS (30000: a stuck collective becomes an error first).
# GPU_STEP_FILTER, GPU_STEP_DONE and GPU_DEADLINE choose the steps and bound them
# (tests/gpu/step-control.sh; tests/gpu/device-checks.sh runs this script's steps that way);
# NT_ARGS_<collective> (NT_ARGS_all_reduce...) replaces NT_ARGS for one collective.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
# shellcheck source=tests/gpu/step-control.sh
. "$root/tests/gpu/step-control.sh"
pack=${NCCL_CLIENTS_PACK:-$root/build-nccl-clients}
work=${NCCL_TESTS_WORK:-$root/build-gpu/nccl-tests}
colls=(all_reduce all_gather broadcast reduce_scatter alltoall sendrecv)

die() { echo "run-nccl-clients: $*" >&2; exit 1; }

do_pack() {
  cd "$root" || exit 1
  local cuda=${CUDA_HOME:-/usr/local/cuda}
  local gencode=${NCCL_TESTS_GENCODE:--gencode=arch=compute_90,code=sm_90}
  local git_dir=${NCCL_TESTS_GIT:-/work/.mirror/NVIDIA+nccl-tests/repo}
  local ref=${NCCL_TESTS_REF:-HEAD}
  [ -e build-gpu/src/nccl/libnccl.so.2 ] && [ -e build-gpu/libhora.so.0 ] ||
    die "no build-gpu/src/nccl/libnccl.so.2: run tests/gpu/run-on-device.sh --pack first"
  [ -d tests/gpu/.libs ] || die "no tests/gpu/.libs: run tests/gpu/run-on-device.sh --pack first"
  grep -q '"name": "cuda", "value": "enabled"' build-gpu/meson-info/intro-buildoptions.json 2>/dev/null ||
    echo "warning: build-gpu does not say cuda=enabled: Hora would run without CUDA there" >&2
  [ -x "$cuda/bin/nvcc" ] || die "no nvcc in $cuda (CUDA_HOME)"
  local commit
  commit=$(git --git-dir="$git_dir" rev-parse --verify "$ref^{commit}" 2>/dev/null) ||
    die "no nccl-tests at $ref in $git_dir (NCCL_TESTS_GIT, NCCL_TESTS_REF): bring a snapshot of NVIDIA/nccl-tests"

  echo "== nccl-tests $commit ($ref) from $git_dir into $work"
  rm -rf "$work"
  mkdir -p "$work/src" "$work/stage/include" "$work/stage/lib" "$work/stage/cudalib" "$work/obj"
  git --git-dir="$git_dir" archive "$commit" | tar -x -C "$work/src" || die "git archive failed"
  # The headers and libraries nccl-tests is built against: Hora's nccl.h and libnccl.so, and the
  # CUDA runtime alone in the CUDA library folder it is told (CUDA_LIB), for that folder may hold an
  # NVIDIA libnccl.so (a CUDA assembled from pip packages does) that the linker would find first.
  cp include/nccl.h "$work/stage/include/nccl.h"
  ln -s "$root/build-gpu/src/nccl/libnccl.so.2" "$work/stage/lib/libnccl.so"
  ln -s "$root/build-gpu/libhora.so.0" "$work/stage/lib/libhora.so.0"
  ln -s "$(readlink -f "$cuda/lib64/libcudart.so")" "$work/stage/cudalib/libcudart.so"
  local devhdr="none needed"
  if grep -q 'nccl_device.h' "$work"/src/src/*.cu "$work"/src/src/*.h 2>/dev/null; then
    local nccl_git=${NCCL_GIT:-/work/.mirror/NVIDIA+nccl/repo} dref=${NCCL_DEVICE_REF:-v2.28.3-1}
    if git --git-dir="$nccl_git" rev-parse -q --verify "$dref^{commit}" >/dev/null 2>&1; then
      git --git-dir="$nccl_git" archive "$dref" src/include/nccl_device.h src/include/nccl_device |
        tar -x -C "$work/stage/include" --strip-components=2 || die "git archive of nccl_device.h failed"
      devhdr="NVIDIA/nccl $dref ($nccl_git)"
    elif [ -f "$cuda/include/nccl_device.h" ]; then
      cp -r "$cuda/include/nccl_device.h" "$cuda/include/nccl_device" "$work/stage/include/"
      devhdr="$cuda/include (NCCL $(awk '/define NCCL_(MAJOR|MINOR|PATCH)/ { printf "%s%s", s, $3; s="." }' "$cuda/include/nccl.h"))"
    else
      die "nccl-tests $ref includes nccl_device.h, which Hora does not ship: bring NVIDIA/nccl (NCCL_GIT) or use NCCL_TESTS_REF=v2.16.9"
    fi
  fi
  echo "== device-API headers: $devhdr"

  local targets=() c
  for c in "${colls[@]}"; do targets+=("$work/obj/${c}_perf"); done
  echo "== make (${#targets[@]} binaries, $gencode), log: $work/build.log"
  local t0=$SECONDS
  # (LD_LIBRARY_PATH: where the linker finds libhora.so.0, which libnccl.so needs)
  LD_LIBRARY_PATH="$work/stage/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" make -C "$work/src/src" -j"$(nproc)" BUILDDIR="$work/obj" NCCL_HOME="$work/stage" CUDA_HOME="$cuda" \
    CUDA_LIB="$work/stage/cudalib" CUDARTLIB=cudart NVCC_GENCODE="$gencode" MPI=0 "${targets[@]}" \
    >"$work/build.log" 2>&1 || { tail -40 "$work/build.log"; die "nccl-tests did not build"; }
  echo "   built in $((SECONDS - t0)) s"

  echo "== gathering into $pack"
  rm -rf "$pack"
  mkdir -p "$pack/hora/src/nccl" "$pack/nccl-tests/bin" "$pack/nccl-tests/lib"
  cp -L build-gpu/libhora.so.0 "$pack/hora/libhora.so.0"
  cp -L build-gpu/src/nccl/libnccl.so.2 "$pack/hora/src/nccl/libnccl.so.2"
  for c in "${colls[@]}"; do
    cp "$work/obj/${c}_perf" "$pack/nccl-tests/bin/"
    strip --strip-debug "$pack/nccl-tests/bin/${c}_perf"
  done
  cp -L "$cuda/lib64/libcudart.so.13" "$pack/nccl-tests/lib/" 2>/dev/null ||
    cp -L "$(readlink -f "$cuda/lib64/libcudart.so")" "$pack/nccl-tests/lib/"
  # The shim's functions carry the version of the runtime's (cudaSetDevice@libcudart.so.13), so that
  # they match the binaries' versioned references exactly.
  local cudart_soname
  cudart_soname=$(readelf -d "$pack/nccl-tests/lib/"libcudart.so.* | awk -F'[][]' '/SONAME/ { print $2 }')
  printf '%s {\n  global: cudaGetDeviceCount; cudaSetDevice; cudaGetDeviceProperties; cudaGetDeviceProperties_v2;\n    cudaDeviceGetAttribute;\n  local: *;\n};\n' \
    "$cudart_soname" >"$work/one_gpu.map"
  cc -shared -fPIC -O2 -Wall -Wl,--version-script="$work/one_gpu.map" -o "$pack/nccl-tests/lib/libnccl_tests_one_gpu.so" \
    tests/gpu/nccl_tests_one_gpu.c -ldl || die "the one-GPU shim did not build"
  {
    echo "nccl-tests: $commit ($ref) from $git_dir"
    echo "device-API headers: $devhdr"
    echo "gencode: $gencode; CUDA: $("$cuda/bin/nvcc" --version | tail -1)"
    echo "hora: $(git -C "$root" rev-parse HEAD 2>/dev/null)$(git -C "$root" diff --quiet HEAD 2>/dev/null || echo ' (with uncommitted changes)')"
    echo "packed: $(date -u +%FT%TZ) on $(hostname)"
    (cd "$pack" && sha256sum hora/libhora.so.0 hora/src/nccl/libnccl.so.2 nccl-tests/bin/* nccl-tests/lib/*)
  } >"$pack/MANIFEST"

  echo "== checks here (no GPU: the binaries cannot run a test)"
  local bad=0 b ld="$pack/hora/src/nccl:$pack/hora:$pack/nccl-tests/lib:$root/tests/gpu/.libs:$root/tests/gpu/.libs/udev"
  nm -D --defined-only "$pack/hora/src/nccl/libnccl.so.2" | awk '{ print $NF }' | sort -u >"$work/hora-exports.txt"
  for b in "$pack"/nccl-tests/bin/*; do
    local needed resolved missing
    needed=$(readelf -d "$b" | awk -F'[][]' '/NEEDED/ { printf "%s ", $2 }')
    resolved=$(LD_LIBRARY_PATH=$ld ldd "$b" | awk '$1 == "libnccl.so.2" || $1 == "libhora.so.0" || $1 == "libcudart.so.13" { printf "%s => %s  ", $1, $3 }')
    # every nccl symbol the binary needs must be Hora's, but the weak ones (the device API's host
    # side, which nccl-tests calls only with -D)
    missing=$(nm -D --undefined-only "$b" | awk '$1 == "U" && $2 ~ /^nccl/ { sub(/@.*/, "", $2); print $2 }' | sort -u |
      comm -23 - "$work/hora-exports.txt" | tr '\n' ' ')
    echo "$(basename "$b"): NEEDED $needed"
    echo "   $resolved"
    [ -z "$missing" ] || { echo "   nccl symbols Hora lacks: $missing"; bad=1; }
    case $resolved in *"libnccl.so.2 => $pack/hora/src/nccl/libnccl.so.2"*"libhora.so.0 => $pack/hora/libhora.so.0"*) ;;
      *) echo "   libnccl.so.2 does not resolve to Hora's"; bad=1 ;; esac
    nm -D --undefined-only "$b" | grep -Eq ' U cudaSetDevice(@|$)' ||
      { echo "   cudaSetDevice is not imported: the shim cannot fold devices"; bad=1; }
  done
  echo "   weak (optional) nccl symbols: $(nm -D --undefined-only "$pack/nccl-tests/bin/all_reduce_perf" | awk '$1 == "w" && $2 ~ /^nccl/ { printf "%s ", $2 }')"
  echo "== all_reduce_perf -h, on Hora, here"
  LD_LIBRARY_PATH=$ld timeout 30 "$pack/nccl-tests/bin/all_reduce_perf" -h 2>&1 | head -12
  echo "== sizes (a device call carries at most 64 MiB, the working tree included)"
  du -sh "$pack" tests/gpu/.libs
  echo "   working tree (tracked and untracked, not ignored): $(git ls-files -co --exclude-standard -z | du -cb --files0-from=- 2>/dev/null | tail -1 | cut -f1) bytes"
  ((bad == 0)) || die "the checks above failed"
  echo "== ready: run on the GPU machine with command 'tests/gpu/run-nccl-clients.sh --prebuilt',"
  echo "   carry [\"build-nccl-clients\", \"tests/gpu/.libs\"], timeout_s 600"
}

do_prebuilt() {
  cd "$root" || exit 1
  [ -x "$pack/nccl-tests/bin/all_reduce_perf" ] || die "no $pack/nccl-tests/bin: run --pack first, and carry $pack"
  local out=${OUT:-$root/build-nccl-clients-out}
  mkdir -p "$out"
  local tmp logs tsv
  tmp=$(mktemp -d /tmp/nccl-clients.XXXXXX)
  logs=$tmp/logs
  tsv=$tmp/steps.tsv
  mkdir -p "$logs"
  : >"$tsv"
  : >"$out/summary.txt"
  : >"$out/steps.log"
  local budget=${NCCL_CLIENTS_BUDGET:-540} nt_limit=${NT_STEP_LIMIT:-60} torch_limit=${TORCH_STEP_LIMIT:-240}
  local nt_args=${NT_ARGS:--b 8 -e 64M -f 4 -c 1 -n 10 -w 2}
  local start=$SECONDS failed=0

  say() { echo "== $*" | tee -a "$out/summary.txt"; }
  # step NAME LIMIT COMMAND...: COMMAND under min(LIMIT, what is left of the budget), its output in
  # $logs/NAME.log and appended to steps.log; the outcome in summary.txt and $tsv.
  step() {
    local name=$1 limit=$2
    shift 2
    gpu_step_wanted "$name" || return 0
    local left=$((budget - (SECONDS - start)))
    ((limit <= left)) || limit=$left
    limit=$(gpu_step_limit "$limit")
    if ((left < 20 || limit == 0)); then
      printf '%s\tskip\t0\n' "$name" >>"$tsv"
      say "$name: SKIPPED (the ${budget} s budget or GPU_DEADLINE is spent)"
      failed=$((failed + 1))
      return 1
    fi
    gpu_step_ran "$name"
    local t0=$SECONDS r=0
    echo "==== $name: $* (limit ${limit} s)" >"$logs/$name.log"
    timeout -k 5 "$limit" "$@" >>"$logs/$name.log" 2>&1 || r=$?
    { cat "$logs/$name.log"; echo "==== $name: rc=$r in $((SECONDS - t0)) s"; echo; } >>"$out/steps.log"
    printf '%s\t%s\t%s\n' "$name" "$r" "$((SECONDS - t0))" >>"$tsv"
    local verdict=PASS
    ((r == 0)) || { verdict=FAIL; failed=$((failed + 1)); }
    ((r == 124 || r == 137)) && verdict="FAIL (timeout)"
    say "$name: $verdict rc=$r in $((SECONDS - t0)) s"
    return "$r"
  }

  # What Hora's libraries need: the carried libsodium and hwloc, libudev where the system has none,
  # and the carried C++ runtime only where the system's is too old for them.
  local libs=$root/tests/gpu/.libs
  local hora_ld=$pack/hora/src/nccl:$pack/hora:$libs
  ldconfig -p 2>/dev/null | grep -q 'libudev.so.1 ' || hora_ld=$hora_ld:$libs/udev
  if LD_LIBRARY_PATH=$hora_ld ldd "$pack/hora/src/nccl/libnccl.so.2" | grep -q 'not found'; then
    hora_ld=$hora_ld:$libs/fallback
    say "this system's C++ runtime is too old for Hora's build: using the carried one"
  fi
  local hora_nccl=$pack/hora/src/nccl/libnccl.so.2
  local shim=$pack/nccl-tests/lib/libnccl_tests_one_gpu.so bin=$pack/nccl-tests/bin
  local nt_ld=$pack/nccl-tests/lib
  export HORA_TIMEOUT_MS=${HORA_TIMEOUT_MS:-30000}
  export PYTHONUNBUFFERED=1

  # NVIDIA's NCCL: NVIDIA_NCCL_LIB, else the one beside torch (the pip package nvidia-nccl-cu*).
  local nv_lib=${NVIDIA_NCCL_LIB:-}
  if [ -z "$nv_lib" ]; then
    nv_lib=$(python3 - <<'EOF' 2>/dev/null
import glob, os, site, sys
c = []
try:
    import nvidia.nccl as m
    for p in getattr(m, "__path__", []):
        c += glob.glob(os.path.join(p, "lib", "libnccl.so.2"))
except Exception:
    pass
for sp in site.getsitepackages() + sys.path:
    c += glob.glob(os.path.join(sp, "nvidia", "nccl", "lib", "libnccl.so.2"))
    c += glob.glob(os.path.join(sp, "nvidia", "cu*", "lib", "libnccl.so.2"))
c = [p for p in c if os.path.isfile(p)]
print(c[0] if c else "")
EOF
)
  fi
  [ -n "$nv_lib" ] || nv_lib=$(ls /usr/local/cuda/lib64/libnccl.so.2 2>/dev/null)
  local nv_dir="" nv_ver=0
  local ver_py='import ctypes, sys; l = ctypes.CDLL(sys.argv[1]); v = ctypes.c_int(); l.ncclGetVersion(ctypes.byref(v)); print(v.value)'
  if [ -n "$nv_lib" ]; then
    nv_dir=$(dirname "$nv_lib")
    nv_ver=$(python3 -c "$ver_py" "$nv_lib" 2>/dev/null | tail -1)
  fi
  [[ $nv_ver =~ ^[0-9]+$ ]] || nv_ver=0
  local hora_ver
  hora_ver=$(LD_LIBRARY_PATH=$hora_ld python3 -c "$ver_py" "$hora_nccl" 2>&1 | tail -1)

  {
    echo "date: $(date -u +%FT%TZ)"
    echo "GPU: $(nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv,noheader 2>&1)"
    nvidia-smi 2>&1 | head -15
    echo "kernel: $(uname -r); $(grep PRETTY_NAME /etc/os-release 2>/dev/null)"
    echo "python3: $(command -v python3) $(python3 --version 2>&1)"
    python3 -c 'import torch; print("torch", torch.__version__, "CUDA", torch.version.cuda, "torch.cuda.nccl.version()", torch.cuda.nccl.version())' 2>&1 | tail -1
    echo "NVIDIA NCCL: ${nv_lib:-not found} ($(readlink -f "$nv_lib" 2>/dev/null)), ncclGetVersion $nv_ver"
    echo "Hora NCCL: $hora_nccl, ncclGetVersion $hora_ver"
    echo "pack:"; cat "$pack/MANIFEST"
    echo "nccl-tests on Hora resolves: $(LD_LIBRARY_PATH=$nt_ld:$hora_ld ldd "$bin/all_reduce_perf" | grep -E 'libnccl|libhora|libcudart' | tr -s ' \t' ' ' | tr '\n' ';')"
    [ -z "$nv_dir" ] || echo "nccl-tests on NVIDIA resolves: $(LD_LIBRARY_PATH=$nt_ld:$nv_dir ldd "$bin/all_reduce_perf" | grep -E 'libnccl|libhora|libcudart' | tr -s ' \t' ' ' | tr '\n' ';')"
  } >"$out/env.txt" 2>&1
  say "GPU: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1 | head -1); NVIDIA NCCL $nv_ver at ${nv_lib:-?}; Hora NCCL $hora_ver"

  nt() {  # nt LIB SETTING(threads) COLL [ENV...]: one nccl-tests run
    local lib=$1 threads=$2 coll=$3 ld args
    shift 3
    if [ "$lib" = hora ]; then ld=$nt_ld:$hora_ld; else ld=$nt_ld:$nv_dir; fi
    args=NT_ARGS_$coll
    args=${!args:-$nt_args}
    # shellcheck disable=SC2086
    step "nt-$lib-$coll-t$threads" "$nt_limit" env "$@" LD_LIBRARY_PATH="$ld" LD_PRELOAD="$shim" \
      "$bin/${coll}_perf" -t "$threads" -g 1 $args
  }
  local c
  # The order puts first what matters most, should the budget run out.
  step torch-symbols 60 python3 tests/gpu/nccl_torch_check.py --symbols "$hora_nccl" --symbols-out "$out/torch-nccl-symbols.txt"
  for c in "${colls[@]}"; do nt hora 1 "$c"; done
  for c in "${colls[@]}"; do nt hora 2 "$c"; done
  local expect=(--expect-lib "$hora_nccl")
  [[ $hora_ver =~ ^[0-9]+$ ]] && expect+=(--expect-version "$hora_ver")
  if ! step torch-hora "$torch_limit" env LD_PRELOAD="$hora_nccl" LD_LIBRARY_PATH="$hora_ld" \
    python3 tests/gpu/nccl_torch_check.py "${expect[@]}" --world 1,2 &&
    grep -q 'undefined symbol' "$logs/torch-hora.log"; then
    # torch could not load on Hora: it binds an nccl symbol Hora lacks at load time. That is the
    # finding (torch-hora failed); to learn the rest anyway, run again with stubs for the missing
    # symbols (each returns ncclInvalidUsage, and none is called by these checks) preloaded too.
    local missing sym
    missing=$(sed -n 's/^MISSING ([0-9]*): //p' "$out/torch-nccl-symbols.txt" 2>/dev/null)
    [ -n "$missing" ] && [ "$missing" != none ] ||
      missing=$(grep -o 'undefined symbol: [A-Za-z0-9_]*' "$logs/torch-hora.log" | awk '{ print $3 }' | sort -u)
    : >"$tmp/stubs.c"
    for sym in $missing; do echo "int $sym(void) { return 5; /* ncclInvalidUsage */ }" >>"$tmp/stubs.c"; done
    if [ -s "$tmp/stubs.c" ] && cc -shared -fPIC -o "$tmp/libnccl_missing_stubs.so" "$tmp/stubs.c"; then
      say "torch-hora-stubs: torch again on Hora with stubs for: $missing"
      step torch-hora-stubs "$torch_limit" env LD_PRELOAD="$hora_nccl $tmp/libnccl_missing_stubs.so" \
        LD_LIBRARY_PATH="$hora_ld" python3 tests/gpu/nccl_torch_check.py "${expect[@]}" --world 1,2
    fi
  fi
  for c in "${colls[@]}"; do nt hora 4 "$c"; done
  if [ -n "$nv_dir" ]; then
    for c in "${colls[@]}"; do nt nvidia 1 "$c"; done
    if ((nv_ver >= 23000)); then
      for c in "${colls[@]}"; do nt nvidia 2 "$c" NCCL_MULTI_RANK_GPU_ENABLE=1; done
      step torch-nvidia "$torch_limit" env NCCL_MULTI_RANK_GPU_ENABLE=1 python3 tests/gpu/nccl_torch_check.py --world 1,2
    else
      say "NVIDIA NCCL $nv_ver is older than 2.30, which refuses two ranks on one GPU: NVIDIA runs at 1 rank only"
      step torch-nvidia "$torch_limit" python3 tests/gpu/nccl_torch_check.py --world 1
    fi
  else
    say "NVIDIA's NCCL not found (NVIDIA_NCCL_LIB): no reference runs"
    failed=$((failed + 1))
  fi

  python3 tests/gpu/nccl_tests_summary.py "$tsv" "$logs" >"$out/nccl-tests-summary.txt" 2>&1 || failed=$((failed + 1))
  tar -czf "$out/step-logs.tgz" -C "$tmp" logs steps.tsv 2>/dev/null
  echo
  cat "$out/nccl-tests-summary.txt"
  echo
  local t
  for t in torch-hora torch-hora-stubs torch-nvidia; do
    [ -f "$logs/$t.log" ] || continue
    grep -E '^FAIL|^[0-9]+ passed, [0-9]+ failed' "$logs/$t.log" | cut -c1-400 | head -40 | sed "s/^/$t: /"
  done
  grep -E '^MISSING' "$out/torch-nccl-symbols.txt" 2>/dev/null | sed 's/^/torch symbols Hora lacks: /'
  echo "== done in $((SECONDS - start)) s: $failed step(s) failed" >>"$out/summary.txt"
  echo
  cat "$out/summary.txt"
  ((failed == 0))
}

case ${1:-} in
  --pack) do_pack ;;
  --prebuilt) do_prebuilt ;;
  *)
    sed -n '2,/^set -uo/p' "$0" | sed '$d'
    exit 2
    ;;
esac
