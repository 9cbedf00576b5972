#!/usr/bin/env bash
# Builds the libFuzzer harnesses of tests/fuzz/ with clang: the harnesses and the parsers they
# drive are compiled with coverage, AddressSanitizer and UndefinedBehaviorSanitizer; everything
# else comes from the library's archive as the project's build made it (gcc or clang), so only
# about a dozen files are compiled again. Incremental: ninja rebuilds what changed.
#
#   tests/fuzz/build.sh BUILD_DIR [OUT_DIR]    (OUT_DIR defaults to BUILD_DIR/fuzz)
#
# Exits 77 (a skip, for meson test) when clang++ or libFuzzer is missing, saying what to install.
set -euo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "${1:?usage: build.sh BUILD_DIR [OUT_DIR]}" && pwd)
out=${2:-$build/fuzz}
CXX=${FUZZ_CXX:-clang++}

skip() { echo "SKIP: $*" >&2; exit 77; }
command -v "$CXX" >/dev/null || skip "no $CXX: install clang (Debian 12: apt-get install clang libclang-rt-dev)"
command -v ninja >/dev/null || skip "no ninja"
mkdir -p "$out"
probe=$out/probe
echo 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }' > "$probe.cc"
"$CXX" -fsanitize=fuzzer,address,undefined "$probe.cc" -o "$probe" 2> "$probe.log" ||
  skip "$CXX cannot link -fsanitize=fuzzer ($(head -c 300 "$probe.log")): install libFuzzer (Debian 12: apt-get install libclang-rt-dev)"
[ -f "$build/libhora_internal.a" ] || { echo "no $build/libhora_internal.a: build the project first (ninja -C $build)" >&2; exit 1; }

# The parsers of bytes from outside the process, and what they call that is worth covering.
parsers=(transports/frame.cc transports/transport.cc src/coll/tag.cc
         src/base/handshake.cc src/base/acceptor.cc src/base/socket.cc src/base/record.cc src/topo/format.cc
         src/comm/bootstrap.cc src/comm/bootstrap_root.cc src/comm/config.cc src/comm/config_nccl.cc src/comm/launch.cc src/coll/cost.cc src/coll/planner.cc)
harnesses=()
for f in "$src"/tests/fuzz/fuzz_*.cc; do h=$(basename "$f" .cc); harnesses+=("${h#fuzz_}"); done

flags="-std=c++17 -O1 -g -fno-omit-frame-pointer -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=all"
incs="-I$src/include -I$build/include -I$src/src -I$build/src -I$src -I$build -I$src/tests $(pkg-config --cflags libsodium hwloc)"
libs="$(pkg-config --libs libsodium hwloc) -lpthread"
# The ib transport (in the archive where libibverbs was found) needs libibverbs and libdl.
! pkg-config --exists libibverbs || libs="$libs $(pkg-config --libs libibverbs) -ldl"
# A CUDA build's archive holds the CUDA kernels and the runtime's callers: the static runtime
# (meson passes where it is).
libs="$libs ${FUZZ_CUDA_LIBS:-}"
{
  echo "cxx = $CXX"
  echo "flags = $flags $incs"
  echo "libs = $libs"
  echo "rule cc"
  echo "  command = \$cxx \$flags -MMD -MF \$out.d -c \$in -o \$out"
  echo "  depfile = \$out.d"
  echo "  deps = gcc"
  echo "  description = clang++ \$in"
  echo "rule link"
  echo "  command = \$cxx -fsanitize=fuzzer,address,undefined \$in -o \$out \$libs"
  echo "  description = link \$out"
  objs=""
  for p in "${parsers[@]}"; do
    o="obj/${p//\//_}.o"
    echo "build $o: cc $src/$p"
    objs+=" $o"
  done
  for h in "${harnesses[@]}"; do
    echo "build obj/fuzz_$h.o: cc $src/tests/fuzz/fuzz_$h.cc"
    # The archive last: its members are taken only for what the objects above leave undefined.
    echo "build $h: link obj/fuzz_$h.o$objs $build/libhora_internal.a"
  done
} > "$out/build.ninja.new"
cmp -s "$out/build.ninja.new" "$out/build.ninja" 2>/dev/null || mv "$out/build.ninja.new" "$out/build.ninja"
rm -f "$out/build.ninja.new"
ninja -C "$out" -j "${FUZZ_JOBS:-2}" >&2
