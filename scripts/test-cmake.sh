#!/usr/bin/env bash
# find_package(Hora) from a CMake project. Installs the build into a scratch DESTDIR, configures
# and builds tests/cmake/consumer with CMAKE_PREFIX_PATH naming the installed prefix there, then
# runs its two programs (Hora::hora and Hora::nccl: the version and a one-rank AllReduce) with
# LD_LIBRARY_PATH unset: they find the libraries through the run path CMake gives them, and
# must find the installed ones. Skipped (exit 77) where cmake is missing.
#
# usage: test-cmake.sh MESON BUILD_DIR PREFIX SOURCE_DIR
set -euo pipefail
meson=$1 build=$2 prefix=$3 src=$4
if ! command -v cmake >/dev/null; then
  echo "SKIP: cmake is not installed (apt-get install cmake)" >&2
  exit 77
fi
tmp=$(mktemp -d "${TMPDIR:-/tmp}/hora-cmake.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
dest=$tmp/dest
"$meson" install -C "$build" --destdir "$dest" --no-rebuild --quiet >/dev/null
root=$dest$prefix

fail() { echo "FAIL: $*" >&2; exit 1; }
config=$(find "$root" -path '*/cmake/Hora/HoraConfig.cmake' | head -1)
[ -n "$config" ] && [ -f "$(dirname "$config")/HoraConfigVersion.cmake" ] ||
  fail "HoraConfig.cmake and HoraConfigVersion.cmake are not installed in <libdir>/cmake/Hora"
echo "config: ${config#"$dest"}"

cmake -S "$src/tests/cmake/consumer" -B "$tmp/build" -DCMAKE_PREFIX_PATH="$root" -DCMAKE_BUILD_TYPE=Release >"$tmp/cmake.log" 2>&1 ||
  { cat "$tmp/cmake.log" >&2; fail "cmake could not configure the consumer"; }
cmake --build "$tmp/build" >"$tmp/build.log" 2>&1 || { cat "$tmp/build.log" >&2; fail "the consumer did not build"; }
for exe in consumer nccl_consumer; do
  # The library the loader picks must be the DESTDIR's, not one installed elsewhere.
  found=$(env -u LD_LIBRARY_PATH ldd "$tmp/build/$exe" | awk '/libhora\.so|libnccl\.so/ { print $3 }')
  for lib in $found; do
    case "$(realpath "$lib")" in "$(realpath "$root")"/*) ;; *) fail "$exe loads $lib, not the installed one" ;; esac
  done
  env -u LD_LIBRARY_PATH "$tmp/build/$exe" || fail "$exe failed (exit $?)"
done
