#!/usr/bin/env bash
# Real torchrun (torch.distributed.run), on one node with 2 workers:
#   - static rendezvous: torchrun's agent holds MASTER_PORT itself; a C program's rendezvous
#     takes MASTER_PORT + 10000 (with HORA_SECRET), and hora.torch's unique id goes through the
#     agent's store (no secret needed); each says which at INFO;
#   - --standalone: nobody holds MASTER_PORT; hora.torch's rank 0 hosts a store beside it.
# Skips (77) where torch cannot be imported.
#   test_torchrun.sh LAUNCH_RANK  (PYTHONPATH and HORA_LIBRARY as for the Python tests)
rank_prog=$1
here=$(cd "$(dirname "$0")" && pwd)
/usr/bin/python3 -c 'import torch.distributed.run' 2>/dev/null || { echo "SKIP: torch.distributed.run cannot be imported"; exit 77; }
. "${0%/*}/lib.sh" || exit 1
# -r 2 -t 1: the workers' stdout on the console (torch 1.13's defaults for these options fail
# under Python 3.11); their stderr goes to files under --log_dir, the library's log to
# HORA_DEBUG_FILE.
torchrun() {
  local name=$1; shift
  HORA_DEBUG=INFO HORA_DEBUG_FILE="$out/$name.log.%p" HORA_TIMEOUT_MS=60000 OMP_NUM_THREADS=1 \
    timeout 180 /usr/bin/python3 -m torch.distributed.run --nproc_per_node 2 -r 2 -t 1 --log_dir "$out/tr-$name" "$@" \
    >"$out/$name" 2>&1
}

port=$(free_port)
torchrun c --nnodes 1 --master_addr 127.0.0.1 --master_port "$port" --no_python env HORA_SECRET="$secret" "$rank_prog" ||
  fail "a C program under torchrun failed"
for r in 0 1; do grep -q "rank $r of 2: sum 3 ok" "$out/c" || fail "C under torchrun: rank $r did not reduce across 2 ranks"; done
grep -qh "rendezvous at 127.0.0.1:$((port + 10000)) from MASTER_ADDR and MASTER_PORT (MASTER_PORT $port + 10000: torchrun's agent holds MASTER_PORT itself)" "$out"/c.log.* ||
  fail "C under torchrun: INFO does not say which port the rendezvous took"

port=$(free_port)
torchrun py --nnodes 1 --master_addr 127.0.0.1 --master_port "$port" "$here/torch_rank.py" ||
  fail "hora.torch under torchrun (static rendezvous) failed"
for r in 0 1; do grep -q "rank $r of 2: sum 3 ok" "$out/py" || fail "hora.torch under torchrun: rank $r did not reduce"; done
grep -rq "hora.torch INFO the unique id comes through torchrun's agent store at 127.0.0.1:$port (MASTER_ADDR, MASTER_PORT)" "$out/tr-py" ||
  fail "hora.torch under torchrun: INFO does not say the id came through the agent's store"

torchrun alone --standalone "$here/torch_rank.py" || fail "hora.torch under torchrun --standalone failed"
for r in 0 1; do grep -q "rank $r of 2: sum 3 ok" "$out/alone" || fail "hora.torch under torchrun --standalone: rank $r did not reduce"; done
grep -rq "hora.torch INFO the unique id comes through a store rank 0 hosts at" "$out/tr-alone" ||
  fail "hora.torch under torchrun --standalone: INFO does not say where the store is"
echo "ok"
