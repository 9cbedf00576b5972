#!/usr/bin/env bash
# The launch recipes of docs/launching.md, run as written, on 2 hosts of a network-namespace cluster
# (tools/hora-netns), 2 ranks per host:
#   - mpirun on one host and across hosts (an rsh agent that enters a host's namespace stands
#     in for ssh), with HORA_ROOT and HORA_SECRET passed by -x;
#   - srun: the environment of a Slurm step (set by hand: no Slurm here), with nothing but a
#     secret file: the root is the step's first node, the port comes from the job and step;
#   - Kubernetes-style pods: MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE and HORA_SECRET;
#   - torchrun on 2 nodes (static rendezvous): a C program with HORA_SECRET, and hora.torch
#     with nothing (its unique id goes through torchrun's store).
# Each rank all-reduces rank + 1 and checks the sum against its size (tests/launch/launch_rank.c).
# Parts whose launcher is missing (mpirun, torch) say SKIP; the whole test skips (77) without
# namespaces.
#   test_recipes.sh HORA_NETNS LAUNCH_RANK  (PYTHONPATH and HORA_LIBRARY as for the Python tests)
NETNS=$1 RANK_BIN=$2
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../multihost/lib.sh" || exit 1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export HORA_TIMEOUT_MS=60000  # a bound on a hang, not a timing

mh_up 2
h0=${MH_PREFIX}0 h1=${MH_PREFIX}1
a0=$("$NETNS" addr 0 -p "$MH_PREFIX")
a1=$("$NETNS" addr 1 -p "$MH_PREFIX")
secret=$(head -c32 /dev/urandom | od -An -tx1 | tr -d ' \n')
printf '%s\n' "$secret" >"$MH_OUT/secret" && chmod 600 "$MH_OUT/secret"
on() { local h=$1; shift; "$NETNS" exec "$h" -p "$MH_PREFIX" "$@"; }

# expect NAME N: NAME's output holds "rank r of N: sum S ok" for every rank r.
expect() {
  local r
  for ((r = 0; r < $2; r++)); do
    grep -q "rank $r of $2: sum $(($2 * ($2 + 1) / 2)) ok" "$MH_OUT/$1" ||
      fail "$1: rank $r did not reduce across $2 ranks: $(tail -5 "$MH_OUT/$1")"
  done
  echo "$1: $2 ranks ok"
}

# ---- mpirun ---------------------------------------------------------------------------------
if command -v mpirun >/dev/null; then
  port=$("$here/../free_port.sh")  # on this host (the other recipes run inside the cluster's hosts)
  timeout 120 mpirun -np 4 -x HORA_ROOT=127.0.0.1:$port -x HORA_SECRET="$secret" "$RANK_BIN" >"$MH_OUT/mpirun1" 2>&1 ||
    fail "mpirun on one host: $(tail -5 "$MH_OUT/mpirun1")"
  expect mpirun1 4
  # ssh's stand-in: "agent HOST COMMAND" runs COMMAND in HOST's namespace.
  printf '#!/bin/sh\nh=$1; shift\nexec ip netns exec "$h" /bin/sh -c "$*"\n' >"$MH_OUT/rsh" && chmod +x "$MH_OUT/rsh"
  # Open MPI's daemon on the far host calls back at once and gives up on the first refusal
  # ("an inability to create a connection back to mpirun"), which a fresh cable under load can
  # give: that failure of Open MPI's own start-up is tried again, at most twice.
  mpirun2() {
    timeout 120 ip netns exec "$h0" mpirun --mca plm_rsh_agent "$MH_OUT/rsh" --mca oob_tcp_if_include eth0 \
      --host "$h0:2,$h1:2" -np 4 -x HORA_ROOT="$a0:29500" -x HORA_SECRET="$secret" "$RANK_BIN" >"$MH_OUT/mpirun2" 2>&1
  }
  rc=1
  for ((try = 0; try < 3; try++)); do
    mpirun2 && rc=0 && break
    grep -q "create a connection back to mpirun" "$MH_OUT/mpirun2" || break
    sleep 1
  done
  [ "$rc" = 0 ] || fail "mpirun across hosts: $(tail -5 "$MH_OUT/mpirun2")"
  expect mpirun2 4
else
  echo "SKIP: mpirun recipes (no mpirun; scripts/install-deps.sh installs openmpi-bin)"
fi

# ---- srun: a step of 4 tasks on 2 nodes, block distribution ---------------------------------
job=$((RANDOM + 1000))
pids=()
for r in 0 1 2 3; do
  h=0
  [ $r -lt 2 ] || h=1
  on "$h" env SLURM_JOB_ID=$job SLURM_STEP_ID=0 SLURM_PROCID=$r SLURM_LOCALID=$((r % 2)) SLURM_NTASKS=4 \
    SLURM_STEP_NUM_TASKS=4 SLURM_STEP_NODELIST="$a0,$a1" SLURM_JOB_NODELIST="$a0,$a1" \
    HORA_SECRET_FILE="$MH_OUT/secret" timeout 120 "$RANK_BIN" >>"$MH_OUT/srun" 2>&1 &
  pids+=($!)
done
wait "${pids[@]}" || fail "srun: a rank failed: $(tail -5 "$MH_OUT/srun")"
expect srun 4

# ---- Kubernetes-style pods: one rank each, the master's address and port -----------------------
pids=()
for r in 0 1 2 3; do
  h=0
  [ $r -lt 2 ] || h=1
  on "$h" env MASTER_ADDR="$a0" MASTER_PORT=23456 RANK=$r WORLD_SIZE=4 HORA_SECRET="$secret" \
    timeout 120 "$RANK_BIN" >>"$MH_OUT/pods" 2>&1 &
  pids+=($!)
done
wait "${pids[@]}" || fail "pods: a rank failed: $(tail -5 "$MH_OUT/pods")"
expect pods 4

# ---- torchrun on 2 nodes --------------------------------------------------------------------
if /usr/bin/python3 -c 'import torch.distributed.run' 2>/dev/null; then
  # -r 2 -t 1: the workers' stdout on the console (torch 1.13's defaults for these options fail
  # under Python 3.11).
  torchrun_nodes() {
    local name=$1 n
    shift
    pids=()
    for n in 0 1; do
      h=0
      [ $n -eq 0 ] || h=1
      on "$h" env OMP_NUM_THREADS=1 timeout 180 /usr/bin/python3 -m torch.distributed.run --nnodes 2 --node_rank $n \
        --nproc_per_node 2 --master_addr "$a0" --master_port 29400 -r 2 -t 1 --log_dir "$MH_OUT/tr-$name-$n" "$@" \
        >>"$MH_OUT/$name" 2>&1 &
      pids+=($!)
    done
    wait "${pids[@]}" || fail "$name: a node failed: $(tail -5 "$MH_OUT/$name")"
  }
  torchrun_nodes torchrun-c --no_python env HORA_SECRET="$secret" "$RANK_BIN"
  expect torchrun-c 4
  torchrun_nodes torchrun-py "$here/torch_rank.py"
  expect torchrun-py 4
else
  echo "SKIP: torchrun recipes (torch cannot be imported)"
fi
echo ok
