#!/usr/bin/env bash
# Ranks started as launchers start them, with the environments srun, torchrun, mpirun and their
# nestings leave (set here by hand: no Slurm is needed): each forms one job with rank and size
# from the innermost launcher, says at INFO where they came from, or fails at once with a text
# that names both sources. Then the texts of a bad secret, a bad HORA_ID, a rendezvous under
# torchrun without a secret, and a rendezvous port someone else holds.
#   test_launchers.sh LAUNCH_RANK
rank_prog=$1
. "${0%/*}/lib.sh" || exit 1

# Runs one rank in a clean environment: rank NAME VAR=VALUE... (output in $out/NAME).
rank() {
  local name=$1; shift
  env -i PATH="$PATH" HORA_DEBUG=INFO HORA_TIMEOUT_MS=60000 "$@" timeout 120 "$rank_prog" >"$out/$name" 2>&1
}

# Holds 127.0.0.1:PORT open, as torchrun's agent holds MASTER_PORT, until the test ends.
hold_port() {
  /usr/bin/python3 -c "
import socket, sys, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(('127.0.0.1', $1)); s.listen(); open(sys.argv[1], 'w').close(); time.sleep(300)" "$out/held.$1" &
  pids+=($!)
  for _ in $(seq 100); do [ -f "$out/held.$1" ] && return; sleep 0.1; done
  fail "could not hold port $1"
}

# ---- srun ... torchrun: srun says 0 of 1 in each worker, torchrun says r of 2 ------------------
port=$(free_port)
hold_port "$port"
for r in 0 1; do
  rank "nested$r" SLURM_JOB_ID=5 SLURM_STEP_ID=0 SLURM_PROCID=0 SLURM_NTASKS=1 SLURM_STEP_NUM_TASKS=1 \
    SLURM_STEP_NODELIST=localhost TORCHELASTIC_RUN_ID=t RANK=$r WORLD_SIZE=2 LOCAL_RANK=$r \
    MASTER_ADDR=127.0.0.1 MASTER_PORT="$port" HORA_SECRET="$secret" &
  pids+=($!)
done
wait "${pids[@]:1}" || fail "srun+torchrun: a rank failed"
for r in 0 1; do
  grep -q "rank $r of 2: sum 3 ok" "$out/nested$r" || fail "srun+torchrun: rank $r did not reduce across 2 ranks"
  grep -q "rank $r of 2 from torchrun (RANK, WORLD_SIZE); rendezvous at 127.0.0.1:$((port + 10000)) from MASTER_ADDR and MASTER_PORT (MASTER_PORT $port + 10000: torchrun's agent holds MASTER_PORT itself); outer launchers, ignored: Slurm (srun) rank 0 of 1" "$out/nested$r" ||
    fail "srun+torchrun: rank $r's INFO does not say where rank, size and rendezvous came from"
done
pids=("${pids[0]}")

# ---- srun alone: the step's first node and a port from job and step ids; a secret file -------
printf '%s\n' "$secret" >"$out/secret" && chmod 600 "$out/secret"
job=$((RANDOM * 7))
for r in 0 1 2; do
  rank "slurm$r" SLURM_JOB_ID=$job SLURM_STEP_ID=1 SLURM_PROCID=$r SLURM_NTASKS=8 SLURM_STEP_NUM_TASKS=3 \
    SLURM_STEP_NODELIST='localhost,node[2-3]' HORA_SECRET_FILE="$out/secret" &
  pids+=($!)
done
wait "${pids[@]:1}" || fail "srun: a rank failed"
for r in 0 1 2; do
  grep -q "rank $r of 3: sum 6 ok" "$out/slurm$r" || fail "srun: rank $r did not reduce across the step's 3 ranks"
  grep -q "rank $r of 3 from Slurm (srun) (SLURM_PROCID, SLURM_STEP_NUM_TASKS); rendezvous at localhost:[0-9]* from SLURM_STEP_NODELIST and SLURM_JOB_ID/SLURM_STEP_ID (the step's first node localhost, a port from job $job step 1)" "$out/slurm$r" ||
    fail "srun: rank $r's INFO does not say where rank, size and rendezvous came from"
done
pids=("${pids[0]}")

# ---- mpirun: rank and size, but a rendezvous must be passed (-x) -------------------------------
rank mpi-none OMPI_COMM_WORLD_RANK=0 OMPI_COMM_WORLD_SIZE=2 && fail "mpirun without a rendezvous ran"
grep -q "error: horaCommInitFromEnv: no rendezvous in the environment for rank 0 of 2 (from Open MPI (mpirun) (OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE)): mpirun gives rank and size but no rendezvous: .*mpirun -x HORA_ROOT=host:port -x HORA_SECRET" "$out/mpi-none" ||
  fail "mpirun without a rendezvous: the error does not say what to pass"
port=$(free_port)
for r in 0 1; do
  rank "mpi$r" OMPI_COMM_WORLD_RANK=$r OMPI_COMM_WORLD_SIZE=2 HORA_ROOT=127.0.0.1:$port HORA_SECRET="$secret" &
  pids+=($!)
done
wait "${pids[@]:1}" || fail "mpirun with HORA_ROOT: a rank failed"
grep -q "rank 1 of 2: sum 3 ok" "$out/mpi1" || fail "mpirun with HORA_ROOT: no 2-rank job"
pids=("${pids[0]}")

# ---- what cannot be resolved fails at once, naming both sources --------------------------------
rank conflict SLURM_JOB_ID=5 SLURM_STEP_ID=0 SLURM_PROCID=1 SLURM_STEP_NUM_TASKS=2 TORCHELASTIC_RUN_ID=t \
  RANK=0 WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 HORA_SECRET="$secret" &&
  fail "a one-rank torchrun inside a 2-task step ran"
grep -q "error: horaCommInitFromEnv: launchers disagree: torchrun says rank 0 of 1 (RANK=0, WORLD_SIZE=1), but it runs inside Slurm (srun) with 2 ranks (SLURM_PROCID=1, SLURM_STEP_NUM_TASKS=2)" "$out/conflict" ||
  fail "the conflict's text does not name both launchers"
rank mixed SLURM_JOB_ID=5 SLURM_STEP_ID=0 SLURM_PROCID=1 SLURM_STEP_NUM_TASKS=2 HORA_SIZE=2 &&
  fail "HORA_SIZE with Slurm's rank ran"
grep -q "error: horaCommInitFromEnv: HORA_SIZE=2 is set but HORA_RANK is not" "$out/mixed" || fail "HORA_SIZE without HORA_RANK: wrong text"
rank batch SLURM_JOB_ID=77 SLURM_PROCID=0 SLURM_NTASKS=4 && fail "a Slurm batch script ran as rank 0 of 4"
grep -q "error: horaCommInitFromEnv: no rank and size in the environment; SLURM_JOB_ID=77 without SLURM_STEP_ID: a Slurm batch script or allocation, not a step (start the ranks with srun)" "$out/batch" ||
  fail "a batch script's text does not say to use srun"

# ---- texts that say what to do ---------------------------------------------------------------
rank secret65 HORA_RANK=0 HORA_SIZE=1 HORA_ROOT=127.0.0.1:1 HORA_SECRET="${secret}a" && fail "a 65-digit secret ran"
grep -q "error: horaCommInitFromEnv: HORA_SECRET has 65 hex digits; it needs 64" "$out/secret65" || fail "65-digit secret: wrong text"
rank id HORA_RANK=0 HORA_SIZE=1 HORA_ID=1234 && fail "HORA_ID=1234 ran"
grep -q "error: horaCommInitFromEnv: HORA_ID='1234' is invalid: .*has 4 digits, not 256" "$out/id" || fail "HORA_ID=1234: the text does not name HORA_ID"
rank nosecret TORCHELASTIC_RUN_ID=t RANK=1 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 &&
  fail "torchrun without a secret ran"
grep -q "error: horaCommInitFromEnv: the rendezvous at 127.0.0.1:39500 (from MASTER_ADDR and MASTER_PORT) needs a secret" "$out/nosecret" ||
  fail "torchrun without a secret: the text does not name MASTER_ADDR/MASTER_PORT"
grep -q "HORA_ROOT" "$out/nosecret" && fail "torchrun without a secret: the text names HORA_ROOT"
port=$(free_port)
rank unreached TORCHELASTIC_RUN_ID=t RANK=1 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port HORA_SECRET="$secret" \
  HORA_TIMEOUT_MS=3000 && fail "rank 1 joined a rendezvous nobody hosts"
grep -q "error: horaCommInitFromEnv: .*joining the rendezvous at 127.0.0.1:$((port + 10000)), which rank 0 hosts.* (the rendezvous address 127.0.0.1:$((port + 10000)) came from MASTER_ADDR and MASTER_PORT)" "$out/unreached" ||
  fail "a rank that cannot reach the rendezvous under torchrun: the text does not name MASTER_ADDR/MASTER_PORT"
hold_port $((port + 10000))
rank inuse TORCHELASTIC_RUN_ID=t RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port HORA_SECRET="$secret" &&
  fail "rank 0 hosted a rendezvous on a port someone holds"
grep -q "error: horaCommInitFromEnv: rank 0 cannot host the rendezvous at 127.0.0.1:$((port + 10000)) (from MASTER_ADDR and MASTER_PORT): .*in use; another process holds that port: choose another with HORA_ROOT=host:port" "$out/inuse" ||
  fail "a held rendezvous port: wrong text"
echo "ok"
