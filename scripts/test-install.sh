#!/usr/bin/env bash
# The installed programs run without LD_LIBRARY_PATH. Installs the build into a scratch DESTDIR,
# checks that every installed program's run path (RUNPATH or RPATH) names the installed libdir,
# then runs the installed allreduce_perf on 2 ranks under the installed hora-run with
# LD_LIBRARY_PATH unset.
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
for exe in "$dest$bindir"/*; do
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
  exec "$1$3/hora-run" -n 2 --timeout 100 "$1$3/allreduce_perf" -b 8 -e 1K' sh "$dest" "$under" "$bindir"
