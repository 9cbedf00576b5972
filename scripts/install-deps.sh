#!/usr/bin/env bash
# Installs what Hora needs to build and test, from Debian's packages (Debian 12 or later).
# iproute2 and nftables: the multi-host tests' hosts (tools/hora-netns) and their impaired links.
# openmpi-bin and libopenmpi-dev: the perf tools built with MPI, so they run under mpirun, and
# the tests that run them so.
# clang and libclang-rt-dev (libFuzzer and the sanitizer runtimes): the fuzz harnesses (tests/fuzz/).
# libibverbs-dev and ibverbs-providers (rdma-core): the ib transport; perftest: its benchmark's
# reference (ib_write_bw, ib_write_lat). The ib tests' VM installs what it needs itself
# (../shared/tools/rdma-vm --setup).
# gcc brings its sanitizer runtimes (libasan8, libubsan1, libtsan2, through libgcc-12-dev): the
# sanitizer builds of scripts/test-sanitizers.sh.
# cmake: the find_package(Hora) consumer test (tests/cmake). python3-mesonpy, patchelf,
# python3-pip and python3-venv: pip install . (pyproject.toml) and its test, a wheel in a fresh virtual environment.
set -euo pipefail
pkgs=(gcc g++ meson ninja-build pkg-config libsodium-dev libhwloc-dev hwloc catch2 python3 python3-matplotlib python3-numpy python3-torch
      dataset-fashion-mnist iproute2 nftables openmpi-bin libopenmpi-dev clang libclang-rt-dev
      libibverbs-dev ibverbs-providers perftest cmake python3-mesonpy patchelf python3-pip python3-venv)
missing=()
for p in "${pkgs[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
[ ${#missing[@]} -eq 0 ] && exit 0
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
