#!/usr/bin/env bash
# nccl.h in every C (C89 to C17) and C++ (C++11 to C++20) standard, with -Wall -Wextra -pedantic
# -Werror: without the CUDA headers, and with them where the CUDA toolkit is (its own headers are
# not C89 nor pedantic C99: those two are checked without them only). Each compile also checks
# the ABI (header_abi.c), and the C++ one runs its initializer checks.
# usage: header_compiles.sh <cc> <c++> <include dir> [cuda include dir]
set -uo pipefail
cc=$1 cxx=$2 inc=$3 cudainc=${4:-}
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0 n=0
flags=(-Wall -Wextra -pedantic -Werror)
build() {  # label, compiler, std, extra...
  local label=$1 comp=$2 std=$3
  shift 3
  n=$((n + 1))
  if "$comp" -std="$std" "${flags[@]}" -I"$inc" "$@" -c "$here/header_abi.c" -o "$tmp/o.o" 2>"$tmp/err"; then
    echo "ok   $label"
  else
    echo "FAIL $label"
    sed 's/^/     /' "$tmp/err" | head -20
    fail=1
  fi
}
for std in c89 c99 c11 c17; do build "$std" "$cc" "$std" -x c; done
for std in c++11 c++14 c++17 c++20; do build "$std" "$cxx" "$std" -x c++; done
if [ -n "$cudainc" ] && [ -f "$cudainc/cuda_runtime.h" ]; then
  for std in c11 c17; do build "$std with the CUDA headers" "$cc" "$std" -x c -I"$cudainc"; done
  for std in c++11 c++14 c++17 c++20; do build "$std with the CUDA headers" "$cxx" "$std" -x c++ -I"$cudainc"; done
  # With the CUDA headers, cudaStream_t is theirs, and the header says so.
  printf '#include <nccl.h>\n#ifndef HORA_NCCL_CUDA_HEADERS\n#error not seen\n#endif\nint x = sizeof(cudaStream_t);\n' > "$tmp/s.c"
  if "$cc" -std=c11 -I"$inc" -I"$cudainc" -c "$tmp/s.c" -o "$tmp/s.o"; then echo "ok   cudaStream_t from the CUDA headers"; else echo "FAIL cudaStream_t"; fail=1; fi
else
  echo "skipped: the compiles with the CUDA headers (no cuda_runtime.h at '${cudainc:-<none given>}')"
fi
# The initializers, run.
printf '#include <stdio.h>\nint header_abi_initializers(void);\nint main(void) { return header_abi_initializers() ? 0 : 1; }\n' > "$tmp/m.c"
if "$cc" -std=c99 -I"$inc" "$here/header_abi.c" "$tmp/m.c" -o "$tmp/m" && "$tmp/m"; then echo "ok   initializers"; else echo "FAIL initializers"; fail=1; fi
echo "$n compiles"
exit $fail
