#!/usr/bin/env bash
# One group of the ib tests (tests/ib/in_vm.sh MODE) inside a VM with a Soft-RoCE device
# (../shared/tools/rdma-vm, beside the project). Skips (77) with the reason where the VM cannot
# run: no rdma-vm, no QEMU and no way to install it, or a VM that fails to boot.
#   run.sh MODE BUILD_DIR [RDMA_VM]
set -u
mode=$1
build=$(cd "$2" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
vm=${3:-${RDMA_VM:-$root/../shared/tools/rdma-vm}}
if [ ! -x "$vm" ]; then
  echo "SKIP: no rdma-vm at $vm (set RDMA_VM to its path): the ib transport is not tested on a real device here"
  exit 77
fi
setup=$("$vm" -q --setup 2>&1)
rc=$?
if [ $rc -ne 0 ]; then
  echo "SKIP: the Soft-RoCE VM cannot run here (rdma-vm --setup exited $rc): $(echo "$setup" | tail -3)"
  exit 77
fi
# The VM shares the current directory read-write: the build tree's logs and core files come back.
cd "$root"
"$vm" -q --cpus 2 --mem 3G --timeout 1500 -- bash "$here/in_vm.sh" "$mode" "$build"
rc=$?
if [ $rc -eq 125 ]; then
  echo "SKIP: the Soft-RoCE VM failed to start (rdma-vm exited 125; see above)"
  exit 77
fi
exit $rc
