#!/usr/bin/env bash
# The perf tools under other launchers than hora-run (perf/meson.build registers the cases).
#
#   test_launch.sh mpi MPIRUN NP TOOL ARGS...
#     TOOL on NP processes started by MPIRUN: it must pass its own check (exit 0) and print
#     one table, of NP ranks taken from MPI. NP separate one-rank jobs would print NP tables
#     of 1 rank each (and a 1-rank check passes trivially), so the rank count is what tells.
#   test_launch.sh no-rendezvous TOOL ARGS...
#     TOOL with a launcher's variables that say 2 ranks but no rendezvous (Open MPI's, then
#     Slurm's, set by hand): it must not run alone; it must exit non-zero naming the variable
#     and what to do (HORA_ROOT and HORA_SECRET).
set -u

fail() {
  echo "FAIL: $*"
  exit 1
}

# No launcher of the calling environment may leak into the cases.
clean_env() {
  local v
  for v in $(compgen -e); do
    case "$v" in
      HORA_* | OMPI_* | PMI_* | PMIX_* | SLURM_* | WORLD_SIZE | RANK | MASTER_ADDR | MASTER_PORT) unset "$v" ;;
    esac
  done
}
clean_env

case "${1:-}" in
  mpi)
    mpirun=$2 np=$3
    shift 3
    flags=()
    # Open MPI refuses root without --allow-run-as-root, and more ranks than cores without
    # --oversubscribe; MPICH's mpirun takes neither.
    if "$mpirun" --version 2>&1 | grep -q 'Open MPI'; then flags=(--allow-run-as-root --oversubscribe); fi
    out=$(mktemp)
    trap 'rm -f "$out"' EXIT
    start=$(date +%s%N)
    "$mpirun" "${flags[@]}" -np "$np" "$@" >"$out" 2>&1
    rc=$?
    ms=$((($(date +%s%N) - start) / 1000000))
    cat "$out"
    echo "# $mpirun -np $np: exit $rc after $ms ms"
    [ "$rc" -eq 0 ] || fail "exit status $rc"
    tables=$(grep -c '^# nranks ' "$out")
    [ "$tables" -eq 1 ] || fail "$tables tables printed: the ranks did not run as one job"
    grep -qx "# nranks $np" "$out" || fail "the table is not of $np ranks: $(grep '^# nranks ' "$out")"
    grep -q "^# Ranks from MPI (.*, $np ranks)\$" "$out" || fail "no '# Ranks from MPI (..., $np ranks)' line"
    grep -q '^# Out of bounds values : 0 OK' "$out" || fail "the check did not pass"
    echo "PASS: one job of $np ranks from MPI, every check right"
    ;;
  no-rendezvous)
    shift
    run_case() {  # NAME VAR=VALUE... : TOOL's exit status and stderr under those variables
      local name=$1 out rc
      shift
      out=$(env "$@" timeout 60 "${tool[@]}" 2>&1 >/dev/null)
      rc=$?
      echo "--- $name: exit $rc"
      echo "$out"
      [ "$rc" -ne 0 ] || fail "$name: exit 0: ran alone although the launcher said 2 ranks"
      [ "$rc" -ne 124 ] || fail "$name: still running after 60 s"
      echo "$out" | grep -q "$name=2 says this is one of 2 ranks" || fail "$name: the error does not name $name"
      echo "$out" | grep -q 'HORA_ROOT=.*HORA_SECRET=' || fail "$name: the error does not say HORA_ROOT and HORA_SECRET"
      message=$out
    }
    tool=("$@")
    run_case OMPI_COMM_WORLD_SIZE OMPI_COMM_WORLD_SIZE=2 OMPI_COMM_WORLD_RANK=0
    if printf '%s\n' "${tool[@]}" | grep -qx -- '--mpi'; then
      echo "$message" | grep -q -- '--mpi 0' || fail "the error does not say that --mpi 0 kept MPI out"
    else
      echo "$message" | grep -q 'with MPI' || fail "the error does not say to build with MPI"
    fi
    run_case SLURM_STEP_NUM_TASKS SLURM_STEP_ID=0 SLURM_STEP_NUM_TASKS=2 SLURM_NTASKS=2 SLURM_PROCID=0
    echo "PASS: no rank ran alone; each said why"
    ;;
  *)
    echo "usage: $0 mpi MPIRUN NP TOOL ARGS... | no-rendezvous TOOL ARGS..." >&2
    exit 2
    ;;
esac
