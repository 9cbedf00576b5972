#!/usr/bin/env bash
# The installed programs run without LD_LIBRARY_PATH. Installs the build into a scratch DESTDIR,
# checks that every installed program's run path (RUNPATH or RPATH) names the installed libdir,
# then runs the installed allreduce_perf on 2 ranks under the installed hora-run with
# LD_LIBRARY_PATH unset. NCCL's ABI: libnccl.so.2 (and the libnccl.so link) only in a directory of
# its own, libdir/hora-nccl, never in libdir itself, finding libhora through its run path; nccl.h
# beside hora.h; a program built with `pkg-config --libs hora-nccl` runs without LD_LIBRARY_PATH.
#
# That run path is absolute (prefix/libdir), so the programs look for libhora where it will be
# once installed, not in the DESTDIR. The run therefore happens in a private mount namespace in
# which the nearest existing directory above libdir shows the DESTDIR's files over its own
# (a read-only overlayfs): the loader finds the library through the run path alone, and nothing
# outside the namespace changes. Where user namespaces or overlayfs are not allowed, the run is
# skipped (exit 77) after the run paths are checked.
#
# usage: test-install.sh MESON BUILD_DIR PREFIX LIBDIR BINDIR
set -euo pipefail
meson=$1 build=$2 prefix=$3 libdir=$4 bindir=$5
[[ $libdir = /* ]] || libdir=$prefix/$libdir
[[ $bindir = /* ]] || bindir=$prefix/$bindir

# The overlay goes on the nearest existing directory above libdir; the DESTDIR must lie outside
# it (overlayfs refuses a layer below its own mount point): in TMPDIR, else in the build dir.
under=$libdir
while [ ! -d "$under" ]; do under=$(dirname "$under"); done
below() { case "$(realpath -m "$1")/" in "$(realpath -m "$under")"/*) return 0 ;; *) return 1 ;; esac; }
scratch=${TMPDIR:-/tmp}
below "$scratch" && scratch=$build/meson-private
dest=$(mktemp -d "$scratch/hora-install.XXXXXX")
trap 'rm -rf "$dest"' EXIT
"$meson" install -C "$build" --destdir "$dest" --no-rebuild --quiet >/dev/null

fail() { echo "FAIL: $*" >&2; exit 1; }
[ -e "$dest$libdir/libhora.so.0" ] || fail "libhora.so.0 is not installed in $libdir"
for p in hora-run allreduce_perf; do [ -x "$dest$bindir/$p" ] || fail "$p is not installed in $bindir"; done
nccl=$dest$libdir/hora-nccl
[ -e "$nccl/libnccl.so.2" ] && [ -L "$nccl/libnccl.so" ] || fail "libnccl.so.2 and libnccl.so are not installed in $libdir/hora-nccl"
! ls "$dest$libdir"/libnccl.so* >/dev/null 2>&1 || fail "libnccl.so is installed in $libdir itself, where it would replace NVIDIA's NCCL"
[ "$(readelf -d "$nccl/libnccl.so.2" | sed -n 's/.*(RUNPATH).*\[\(.*\)\]$/\1/p')" = '$ORIGIN/..' ] ||
  fail "libnccl.so.2's run path is not \$ORIGIN/.. (libhora beside its directory)"
pc=$dest$libdir/pkgconfig/hora-nccl.pc
[ -f "$pc" ] && grep -q -- '-L${libdir}/hora-nccl' "$pc" || fail "hora-nccl.pc is missing or does not point at libdir/hora-nccl"
inc=$(find "$dest" -name nccl.h -path '*/include/*' | head -1)
[ -n "$inc" ] && [ -f "$(dirname "$inc")/hora.h" ] || fail "nccl.h is not installed beside hora.h"
for exe in "$dest$bindir"/*; do
  # (A program that does not link libhora, as hora-inspect, needs no run path.)
  readelf -d "$exe" | grep -q 'NEEDED.*\[libhora\.so' || { echo "${exe##*/}: does not link libhora"; continue; }
  # "0x...1d (RUNPATH)  Library runpath: [a:b]" -> a b
  paths=$(readelf -d "$exe" | sed -n 's/.*(R\(UN\)\{0,1\}PATH).*\[\(.*\)\]$/\2/p' | tr ':' ' ')
  [[ " $paths " = *" $libdir "* ]] || fail "${exe##*/}: run path [${paths}] does not name $libdir"
  echo "${exe##*/}: run path $paths"
done

if [ "$under" = / ] || below "$dest"; then
  echo "SKIP: the installed run needs an overlay on $under, which would hide / or the DESTDIR $dest" >&2
  exit 77
fi
if ! unshare -rm true 2>/dev/null; then
  echo "SKIP: no user and mount namespaces here (unshare -rm), so the installed run is not tried" >&2
  exit 77
fi
echo "running $bindir/hora-run -n 2 $bindir/allreduce_perf with $dest$under shown over $under"
env -u LD_LIBRARY_PATH unshare -rm sh -c '
  mount -t overlay hora-install -o "lowerdir=$1$2:$2" "$2" ||
    { echo "SKIP: overlayfs could not be mounted on $2" >&2; exit 77; }
  "$1$3/hora-run" -n 2 --timeout 100 "$1$3/allreduce_perf" -b 8 -e 1K || exit 1
  # A program built against the installed nccl.h with pkg-config hora-nccl'"'"'s flags: one rank,
  # host buffers, the version and an AllReduce.
  t=$(mktemp -d)
  printf "%s\n" "#include <nccl.h>" "#include <stdio.h>" \
    "int main(void) { int v = 0; ncclUniqueId id; ncclComm_t c; float x = 2, y = 0;" \
    "  if (ncclGetVersion(&v) || v != NCCL_VERSION_CODE || ncclGetUniqueId(&id) || ncclCommInitRank(&c, 1, id, 0)) return 1;" \
    "  if (ncclAllReduce(&x, &y, 1, ncclFloat, ncclSum, c, NULL) || y != 2 || ncclCommDestroy(c)) return 2;" \
    "  printf(\"nccl program: version %d, AllReduce exact\\n\", v); return 0; }" > "$t/app.c"
  cc -I"$(dirname "$4")" "$t/app.c" $(PKG_CONFIG_PATH="$2/pkgconfig" pkg-config --libs hora-nccl 2>/dev/null ||
      PKG_CONFIG_PATH="$5/pkgconfig" pkg-config --libs hora-nccl) -o "$t/app" && "$t/app"
  rc=$?; rm -rf "$t"; exit $rc' sh "$dest" "$under" "$bindir" "$inc" "$libdir"
