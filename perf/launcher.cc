// Where a tool's ranks come from (common.h): the launcher whose variables this process holds.
#include <cstdlib>
#include <cstring>
#include <string>

#include "common.h"
#include "options.h"

namespace hperf {

const char* envValue(const char* name) {
  const char* v = std::getenv(name);
  return v && *v ? v : nullptr;
}

bool Launcher::hora() const { return sizeVar && std::strcmp(sizeVar, "HORA_SIZE") == 0; }
bool Launcher::slurm() const { return sizeVar && std::strncmp(sizeVar, "SLURM_", 6) == 0; }
const char* Launcher::rank() const {
  const char* v = rankVar ? envValue(rankVar) : nullptr;
  return v ? v : "?";
}
std::string Launcher::describe() const {
  return std::string(name) + " (" + sizeVar + "=" + envValue(sizeVar) + ")";
}

// The first of kLaunchers whose size variable holds a number (HORA_SIZE whatever it holds:
// horaCommInitFromEnv judges it). Open MPI's and PMI's come before Slurm's: mpirun in an
// allocation starts its daemons with srun, so its ranks see a Slurm step of one task per
// host as well.
Launcher findLauncher() {
  static const struct {
    const char* size;
    const char* rank;
    const char* name;
    bool mpi;
  } kLaunchers[] = {
      {"HORA_SIZE", "HORA_RANK", "hora-run", false},
      {"OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "Open MPI's mpirun", true},
      {"PMI_SIZE", "PMI_RANK", "a PMI launcher", true},  // MPICH's mpiexec, srun --mpi=pmi2
      {"SLURM_STEP_NUM_TASKS", "SLURM_PROCID", "srun", false},
      {"SLURM_NTASKS", "SLURM_PROCID", "srun", false},  // in a step only: not a batch script's
      {"WORLD_SIZE", "RANK", "torchrun", false},
  };
  Launcher l;
  for (const auto& k : kLaunchers) {
    const char* v = envValue(k.size);
    long n = 0;
    const bool number = v && parseInt(v, 1, 1 << 20, &n);
    if (!v || (!number && std::strcmp(k.size, "HORA_SIZE") != 0)) continue;
    if (std::strncmp(k.size, "SLURM_", 6) == 0 && !envValue("SLURM_STEP_ID")) continue;
    l.sizeVar = k.size;
    l.rankVar = k.rank;
    l.name = l.hora() && !envValue("HORA_ID") ? "the environment" : k.name;  // HORA_ROOT, by hand
    l.size = static_cast<int>(n);
    l.mpi = k.mpi;
    return l;
  }
  return l;
}

}  // namespace hperf
