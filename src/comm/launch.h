// Launchers: where a rank started by hora-run, torchrun, mpirun, mpiexec or srun finds its
// rank, its job's size and the rendezvous (horaCommInitFromEnv).
//
// Launchers nest (torchrun inside srun, mpirun inside an sbatch step, hora-run inside any of
// them), and each leaves its variables to the processes it starts. Rank and size therefore come
// from one launcher as a whole, the innermost one, never variable by variable:
//
//   HORA_RANK/HORA_SIZE (hora-run, or set by hand)   innermost
//   RANK/WORLD_SIZE (torchrun; torch's env:// convention)
//   OMPI_COMM_WORLD_RANK/SIZE (Open MPI), PMI_RANK/PMI_SIZE (MPICH, srun --mpi=pmi2)
//   SLURM_PROCID/SLURM_STEP_NUM_TASKS (srun; only inside a step, not in a batch script)
//
// What cannot be resolved is an error naming both sources and their values: two launchers of
// one level that disagree, a launcher that gives a rank without a size, a rank out of range, and
// an inner launcher that says one rank where an outer one says more (the ranks would run as
// separate one-rank jobs and reduce nothing: the silent failure this order exists to prevent).
//
// The rendezvous: HORA_ID, else HORA_ROOT, else MASTER_ADDR with a port derived from
// MASTER_PORT (torchrun's agent holds MASTER_PORT itself; so would torch's own store), else,
// under srun, the step's first node with a port derived from the job and step ids. Every
// rendezvous but HORA_ID needs the secret, HORA_SECRET or HORA_SECRET_FILE.
#pragma once
#include <string>
#include <vector>

#include "base/handshake.h"
#include "comm/config.h"

namespace hora {

struct LaunchEnv {
  int rank = -1;
  int size = -1;
  std::string launcher;  // who gave rank and size, e.g. "torchrun (RANK, WORLD_SIZE)"; empty: nobody
  std::string idHex;     // HORA_ID
  std::string root;      // host:port of the rendezvous, when not HORA_ID
  std::string rootFrom;  // the variables the root came from, for texts: "HORA_ROOT", "MASTER_ADDR and MASTER_PORT", ...
  std::string secretHex;   // HORA_SECRET, or the contents of HORA_SECRET_FILE
  std::string secretFrom;  // "HORA_SECRET" or "HORA_SECRET_FILE (path)"
  // For the log at INFO: where rank, size and the rendezvous came from, e.g. "rank 1 of 2 from
  // torchrun (RANK, WORLD_SIZE); rendezvous at node7:39500 from MASTER_ADDR and MASTER_PORT
  // 29500 + 10000 (torchrun holds MASTER_PORT); ignored: Slurm (srun) rank 0 of 1".
  std::string source;
  // Worth a WARN (e.g. an inner job smaller than the outer launcher's).
  std::vector<std::string> warnings;
  // When there is no rendezvous: what this launcher's user should set (a sentence).
  std::string rendezvousHint;
};

// Parses the launchers' variables as described above; throws Error(InvalidArgument) naming the
// variables and values that disagree or are malformed. Reads HORA_SECRET_FILE when set.
LaunchEnv parseLaunchEnv(const EnvLookup& env);

// The secret from the 64 hex digits in l.secretHex; the error names l.secretFrom and says what
// is wrong ("HORA_SECRET has 65 hex digits; it needs 64").
Secret parseSecret(const LaunchEnv& l);

// The first host of a Slurm host list: "node[07-09,12],gpu1" -> "node07".
std::string firstSlurmHost(const std::string& nodelist);

// The port of the rendezvous that torchrun's MASTER_PORT implies (MASTER_PORT + 10000, or
// - 10000 near the top), and the one a Slurm step implies (12000..31999, from job and step ids).
int portBesideMasterPort(int masterPort);
int slurmStepPort(unsigned long long jobId, unsigned long long stepId);

}  // namespace hora
