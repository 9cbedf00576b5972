#!/usr/bin/env bash
# Device buffers across hosts, on the emulated GPU: the sample of collectives with every buffer
# in (emulated) device memory, without a stream and on one, on 3 hosts of 2, 1 and 1 ranks. The
# calls are bounced through host blocks, their copies in and out ops of the calls' programs in
# chunks of 64 KiB (HORA_CUDA_BOUNCE_CHUNK), overlapping the wire; every result exact.
#   test_device.sh HORA_NETNS MH_RANK
NETNS=$1 RANK_BIN=$2
. "${0%/*}/lib.sh" || exit 1

mh_up 3
export HORA_TIMEOUT_MS=60000  # a bound on a hang, not a timing
export HORA_CUDA=emulate HORA_CUDA_BOUNCE_CHUNK=64K
start=$SECONDS
mh_start device "0 0 1 2" device
mh_wait
mh_expect_done device
mh_check_links device
ran=$(mh_fact device 0 ran | wc -l)
[ "$ran" -eq 20 ] || fail "rank 0 ran $ran cases, not 20: $(mh_fact device 0 ran | tail -3)"
echo "ok: $ran collectives on device buffers exact on every rank in $((SECONDS - start)) s"
