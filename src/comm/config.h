// Configuration: the one place that reads HORA_* environment variables, and the NCCL_* ones
// that set the same knobs (whichever ABI the program uses). Every variable is listed in
// kVariables (config_table.cc) with its meaning and the NCCL_* variables it also reads, and the
// configuration reference (docs/configuration.md) is generated from it. An invalid HORA_* value is an error (Errc::InvalidArgument)
// with a message naming the variable, the value and what was expected; it is never silently
// ignored. A HORA_* variable wins over its NCCL_* twins; an NCCL_* value Hora cannot take is
// never an error, but a warning that it is ignored (Config::ncclWarnings).
#pragma once
#include <chrono>
#include <cstddef>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "base/log.h"
#include "coll/planner.h"

namespace hora {

struct Config {
  log::Level debugLevel = log::Level::Warn;
  uint32_t debugSubsys = log::kAll;
  std::string debugFile;  // HORA_DEBUG_FILE's pattern; empty: stderr
  std::chrono::milliseconds timeout{600000};
  std::string socketIfname;  // empty: the address that reaches the rendezvous
  std::vector<std::string> transports;  // HORA_TRANSPORTS; by default every optional transport built in
  std::string algo = "auto";                       // HORA_ALGO as given (lower case)
  std::array<int, coll::kKinds> algoForced = coll::PlannerSettings().forced;  // ... parsed
  std::string tuneFile;                            // HORA_TUNE_FILE
  coll::Costs costs;                               // ... loaded, or the defaults
  int nsocksPerPeer = 2;
  std::string ibHca;      // HORA_IB_HCA as given; the ib transport parses it
  int ibGidIndex = -1;    // HORA_IB_GID_INDEX; -1: chosen per port
  int ibQpsPerPeer = 1;   // HORA_IB_QPS_PER_PEER
  size_t chunkBytes = 512 * 1024;
  bool hierStage = true;  // HORA_HIER_STAGE
  bool shmSingleCopy = true;  // HORA_SHM_SINGLE_COPY
  bool callCheck = true;  // HORA_CALL_CHECK
  std::string kernelIsa = "auto";
  std::string cuda = "auto";  // HORA_CUDA: auto, off, emulate
  bool cudaIpc = true;        // HORA_CUDA_IPC
  bool cudaKernels = true;    // HORA_CUDA_KERNELS
  size_t cudaBounceChunk = size_t(1) << 20;  // HORA_CUDA_BOUNCE_CHUNK (0: whole)
  bool cudaWaitKernel = false;  // HORA_CUDA_STREAM_WAIT=kernel
  std::string topoFile;  // HORA_TOPO_FILE: an hwloc XML file; empty: this machine
  bool commBlocking = true;   // HORA_COMM_BLOCKING: the default of horaConfig_t.blocking
  bool debugVersion = false;  // NCCL_DEBUG=VERSION: the version banner even at WARN
  int traceCalls = 2000;      // HORA_TRACE_CALLS: calls each communicator's flight recorder keeps (0: off)
  std::string dumpDir;        // HORA_DUMP_DIR: where dumps go; empty: the working directory
  bool dumpSignal = true;     // HORA_DUMP_SIGNAL: SIGUSR1 writes a dump

  // What config() logs (subsystem ENV) of the NCCL_* variables: at INFO, which setting came from
  // which of them and which were overridden by their HORA_* twins; at WARN, values ignored.
  std::vector<std::string> ncclNotes;
  std::vector<std::string> ncclWarnings;
  std::map<std::string, std::string> ncclSource;  // HORA_* name -> the NCCL_* variable(s) it was read from
};

using EnvLookup = std::function<std::optional<std::string>(const char* name)>;
EnvLookup processEnv();

// Parses the library's settings; throws Error(InvalidArgument) on the first bad value.
Config parseConfig(const EnvLookup& env);
// A variable's value without leading and trailing blanks; an integer variable in [lo, hi],
// or Error(InvalidArgument) "NAME='value' is invalid: expected <expected>".
std::string trimBlanks(const std::string& s);
long long parseIntVariable(const char* name, const std::string& v, long long lo, long long hi,
                           const char* expected);

// Names of HORA_* variables in `names` that Hora does not know, each with a suggestion.
std::vector<std::string> unknownVariables(const std::vector<std::string>& names);

// The sections of the configuration reference (docs/configuration.md), in its order.
enum class Topic { Core, Transports, Ib, Cuda, Launch, HoraRun, Python, TorchBackend, Perf, NcclIgnored };
const char* topicTitle(Topic t);

// One row of the table of every variable (kVariables in config_table.cc), from which the configuration
// reference is generated (tools/hora_config_doc.cc).
struct Variable {
  const char* name;  // HORA_*; null in a row of NCCL variables that Hora knows and ignores
  Topic topic;
  const char* type;         // what kind of value: "integer", "size", "0 or 1", "keyword", "list", "path", ...
  const char* defaultText;  // "" where unset means nothing is done (or the variable is required)
  const char* values;       // the values it takes
  const char* meaning;
  // NCCL's variables read where `name` is not set (comma separated), and how their values are
  // translated; in a row without a name, the NCCL variables Hora ignores, and why.
  const char* nccl = "";
  const char* ncclNote = "";
};
// Every row of the table, in its order.
const std::vector<Variable>& variables();

// The NCCL_* variables of the table, for documentation and tests: `hora` is the HORA_* variable
// they are read as ("" for NCCL variables Hora knows and ignores), `note` how their values are
// translated (or why they are ignored).
struct NcclVariables {
  std::string hora;
  std::vector<std::string> nccl;
  std::string note;
};
std::vector<NcclVariables> ncclVariables();
// The NCCL_* names in `names` that Hora does not read (those it knows and ignores, and others).
std::vector<std::string> unreadNcclVariables(const std::vector<std::string>& names);

// The process-wide settings, parsed once on first use from the environment; throws the parse
// error on every call if the environment is invalid. Applies the logging and kernel settings,
// and hands the log the version banner.
const Config& config();

// Applies the logging settings of the environment as it is now (horaResetDebugInit); throws
// the parse error of an invalid environment.
void reloadLogging();

// "Hora <version> (<build type>, kernels: <isa>, transports: <list>)": the line that opens a
// process's log at INFO (log::setBanner), with the settings of config().
std::string versionBanner();

}  // namespace hora
