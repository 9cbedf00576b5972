// hora-topo: what hwloc sees on this machine, as the library will see it: packages, NUMA
// nodes, cores, PUs, caches, NICs and GPUs with their locality, and where hora-topo itself
// runs (as rank 0). Started as the ranks of a job (hora-run -n 4 hora-topo, srun, mpirun),
// it joins the job as the library does, and rank 0 prints every host, with the ranks on it
// and where each runs, as every rank learns it at init.
//
//   hora-topo [--json]
//
// HORA_TOPO_FILE=FILE.xml describes another machine (an hwloc XML file, `lstopo --of xml`).
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "base/error.h"
#include "comm/comm.h"
#include "comm/config.h"
#include "comm/launch.h"
#include "hora.h"
#include "topo/topology.h"

namespace {

const char kUsage[] =
    "usage: hora-topo [--json]\n"
    "\n"
    "Prints the topology of this machine as Hora sees it through hwloc: packages, NUMA nodes,\n"
    "cores, PUs, caches, network devices and GPUs with the NUMA node and package nearest each,\n"
    "and where hora-topo runs (rank 0). HORA_TOPO_FILE=FILE.xml reads an hwloc XML file\n"
    "(lstopo --of xml FILE.xml) instead of this machine.\n"
    "\n"
    "options:\n"
    "  --json      one line of JSON: {\"hosts\": [{\"name\", \"packages\", \"numa_nodes\", \"cores\",\n"
    "              \"pus\", \"caches\", \"nics\", \"gpus\", \"ranks\"}]}\n"
    "  -h, --help  show this text\n";

int run(int argc, char** argv) {
  bool json = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--json") == 0) {
      json = true;
    } else if (std::strcmp(argv[i], "-h") == 0 || std::strcmp(argv[i], "--help") == 0) {
      std::fputs(kUsage, stdout);
      return 0;
    } else {
      std::fprintf(stderr, "hora-topo: unknown argument '%s'\n%s", argv[i], kUsage);
      return 2;
    }
  }
  try {
    if (hora::parseLaunchEnv(hora::processEnv()).size > 1) {
      horaComm_t comm = nullptr;
      if (horaCommInitFromEnv(&comm) != horaSuccess) {
        std::fprintf(stderr, "hora-topo: %s\n", horaGetLastError(nullptr));
        return 1;
      }
      const std::vector<hora::topo::HostEntry> hosts = hora::jobHosts(comm->self().peers);
      if (comm->self().rank == 0)
        std::fputs((json ? hora::topo::toJson(hosts) + "\n" : hora::topo::toText(hosts)).c_str(), stdout);
      horaCommDestroy(comm);
      return std::fflush(stdout) == 0 ? 0 : 1;
    }
    const std::string& file = hora::config().topoFile;
    hora::topo::HostEntry entry;
    entry.host = hora::topo::discover(file);
    entry.ranks = {0};
    entry.places = {hora::topo::place(file)};
    std::string out = json ? hora::topo::toJson({entry}) + "\n" : hora::topo::toText({entry});
    std::fputs(out.c_str(), stdout);
  } catch (const hora::Error& e) {
    std::fprintf(stderr, "hora-topo: %s\n", e.what());
    return 1;
  }
  return std::fflush(stdout) == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) { return run(argc, argv); }
