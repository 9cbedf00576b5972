#!/usr/bin/env bash
# pip install . : builds the wheel from the source tree with meson-python (no build isolation,
# no package index, CUDA off to keep it short), installs it in a fresh virtual environment that
# sees the system's packages (torch) and nothing of this build, and there runs a 2-rank
# hora.torch allreduce under the environment's own hora-run. hora._core must load the wheel's
# libhora, from inside the installed package. Skipped (exit 77) where meson-python, the venv
# module, pip, torch or patchelf is missing.
#
# usage: test-wheel.sh PYTHON SOURCE_DIR
set -euo pipefail
py=$1 src=$2
for m in mesonpy venv pip torch; do
  "$py" -c "import $m" 2>/dev/null || { echo "SKIP: $py cannot import $m (scripts/install-deps.sh installs it)" >&2; exit 77; }
done
command -v patchelf >/dev/null || { echo "SKIP: patchelf is not installed (scripts/install-deps.sh installs it)" >&2; exit 77; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/hora-wheel.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
unset PYTHONPATH HORA_LIBRARY LD_LIBRARY_PATH

start=$SECONDS
# pip builds in the source tree: meson-python's build directory is a temporary .mesonpy-* there.
(cd "$src" && "$py" -m pip wheel --no-build-isolation --no-deps --no-index -w "$tmp/dist" \
   --config-settings=setup-args=-Dcuda=disabled . ) >"$tmp/wheel.log" 2>&1 ||
  { tail -40 "$tmp/wheel.log" >&2; fail "the wheel did not build"; }
wheel=$(ls "$tmp"/dist/hora-*.whl)
echo "built ${wheel##*/} in $((SECONDS - start)) s:"
"$py" -m zipfile -l "$wheel" | awk 'NR > 1 { print "  " $1 }'

"$py" -m venv --system-site-packages --without-pip "$tmp/venv"
venv=$tmp/venv
"$venv/bin/python" -m pip install --no-deps --no-index --quiet "$wheel" || fail "pip could not install the wheel"
[ -x "$venv/bin/hora-run" ] || fail "hora-run is not in the environment's bin"

cd "$tmp"
loaded=$("$venv/bin/python" -c 'import hora._core as c; print(c.lib._name)')
echo "hora._core loads $loaded"
case "$(realpath "$loaded")" in "$(realpath "$venv")"/lib/*/hora/*) ;; *) fail "hora._core loaded $loaded, not the wheel's libhora" ;; esac
env -u LD_LIBRARY_PATH "$venv/bin/hora-run" -n 2 --timeout 120 "$venv/bin/python" -c '
import os, sys, torch, hora._core, hora.torch as hvd
assert os.path.realpath(hora._core.lib._name).startswith(os.path.realpath(sys.prefix)), hora._core.lib._name
hvd.init()
t = hvd.allreduce(torch.full((4,), float(hvd.rank() + 1)), op=hvd.Sum)
assert t.tolist() == [3.0] * 4, t
print("rank %d of %d: allreduce %s" % (hvd.rank(), hvd.size(), t.tolist()))
hvd.shutdown()' || fail "the 2-rank hora.torch allreduce under the environment's hora-run failed"
