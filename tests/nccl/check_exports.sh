#!/usr/bin/env bash
# libnccl.so.2 against NCCL 2.28's API (api-2.28.txt) and Hora's nccl.h:
#   - its SONAME is libnccl.so.2 and the libnccl.so link resolves to it;
#   - it exports every function of the list and its pnccl twin, and nothing else but the host
#     entry points of NCCL's device API (nccl_device.h: ncclDevCommCreate, ncclDevCommDestroy,
#     which torch imports; nccl.h does not declare them, as NVIDIA's does not);
#   - nccl.h declares exactly those functions and twins;
#   - ncclGetVersion (called through the library) says NCCL_VERSION_CODE of the header.
# usage: check_exports.sh <libnccl.so.2> <api list> <nccl.h> <cc> [the build's -fsanitize=...]
set -euo pipefail
lib=$1 list=$2 header=$3 cc=$4 sanitize=${5:-}
fail=0
say() { echo "FAIL: $*"; fail=1; }

soname=$(readelf -d "$lib" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
[ "$soname" = libnccl.so.2 ] || say "SONAME is '$soname', not libnccl.so.2"
dir=$(dirname "$lib")
[ "$(readlink -f "$dir/libnccl.so")" = "$(readlink -f "$lib")" ] || say "$dir/libnccl.so does not lead to $lib"

mapfile -t api < <(grep -v '^#' "$list" | grep .)
[ ${#api[@]} -eq 40 ] || say "the list has ${#api[@]} functions, NCCL 2.28's API has 40"
exported=$(nm -D --defined-only "$lib" | awk '$2 ~ /^[TWi]$/ {print $3}' | sort)
declaredOnly=$(for f in "${api[@]}"; do echo "$f"; echo "p$f"; done | sort)
expected=$( (echo "$declaredOnly"; for f in ncclDevCommCreate ncclDevCommDestroy; do echo "$f"; echo "p$f"; done) | sort)
missing=$(comm -13 <(echo "$exported") <(echo "$expected"))
extra=$(comm -23 <(echo "$exported") <(echo "$expected"))
[ -z "$missing" ] || say "not exported: $(echo $missing)"
[ -z "$extra" ] || say "exported beyond NCCL's API: $(echo $extra)"

# The header's function declarations (name before '('), both prefixes.
declared=$(grep -oE '\bp?nccl[A-Za-z]+ *\(' "$header" | tr -d ' (' | sort -u)
missingDecl=$(comm -13 <(echo "$declared") <(echo "$declaredOnly"))
extraDecl=$(comm -23 <(echo "$declared") <(echo "$declaredOnly"))
[ -z "$missingDecl" ] || say "nccl.h does not declare: $(echo $missingDecl)"
[ -z "$extraDecl" ] || say "nccl.h declares beyond NCCL's API: $(echo $extraDecl)"

# The version the library reports is the header's.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cat > "$tmp/v.c" <<'PROG'
#include <nccl.h>
#include <stdio.h>
int main(void) {
  int v = 0, pv = 0;
  if (ncclGetVersion(&v) != ncclSuccess || pncclGetVersion(&pv) != ncclSuccess) return 2;
  printf("%d %d %d\n", v, pv, NCCL_VERSION_CODE);
  return v == NCCL_VERSION_CODE && pv == v ? 0 : 1;
}
PROG
"$cc" $sanitize -I"$(dirname "$header")" "$tmp/v.c" -L"$dir" -lnccl -Wl,-rpath,"$dir" -o "$tmp/v"
out=$("$tmp/v") || say "ncclGetVersion: $out (library, twin, header)"
echo "exports: ${#api[@]} functions and their twins; ncclGetVersion: $out"
[ $fail -eq 0 ] && echo "PASS"
exit $fail
