// hora-run: starts N local ranks of a program with the environment Hora's ranks read
// (HORA_ID, HORA_RANK, HORA_SIZE, HORA_LOCAL_RANK, HORA_LOCAL_SIZE).
//
//   hora-run -n N [--timeout S] [--bind core|numa|none] [--no-prefix] [--] PROGRAM [ARGS...]
//   hora-run --status [PID] [--json]
//
// This file reads the command line and makes the rendezvous id; hora_run_cpus.cc places the
// ranks on CPUs and hora_run_job.cc does the rest.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "hora.h"
#include "hora_run.h"

extern char** environ;

namespace hora::run {
namespace {

constexpr int kMaxRanks = 1024;
constexpr double kMaxSeconds = 1e9;
constexpr double kDefaultGraceS = 5;

const char kUsage[] =
    "usage: hora-run -n N [--timeout S] [--bind core|numa|none] [--no-prefix] [--] PROGRAM [ARGS...]\n"
    "       hora-run --status [PID] [--json]\n"
    "\n"
    "Starts N local ranks of PROGRAM (looked up in PATH) with HORA_ID, HORA_RANK, HORA_SIZE,\n"
    "HORA_LOCAL_RANK and HORA_LOCAL_SIZE set, and waits for all of them. Each output line of\n"
    "rank r is prefixed with \"[r] \". If a rank fails, the others get SIGTERM and, after\n"
    "HORA_RUN_GRACE_S seconds (default 5), SIGKILL; the exit status is the first failing\n"
    "rank's (128+signal if it was killed). SIGINT and SIGTERM are forwarded to all ranks; a\n"
    "second one kills them. The ranks' standard input is /dev/null.\n"
    "\n"
    "The CPUs hora-run may use are those of its affinity mask (taskset, cpuset) that no other\n"
    "Hora job of this host has claimed; it claims the ones it binds to for the job's life in\n"
    "HORA_RUN_CPU_CLAIMS (default /dev/shm/hora-run.cpus). When other jobs leave too few for\n"
    "one per rank, the ranks run unbound (with --bind core, share the CPUs left) and hora-run\n"
    "says so. HORA_RUN_BIND=core|numa|none sets --bind's default.\n"
    "\n"
    "The ranks' flight recorder dumps go to HORA_DUMP_DIR, which hora-run sets to its working\n"
    "directory when it is unset. --status asks every rank of the running job (of hora-run PID,\n"
    "or this user's only one) for its dump with SIGUSR1 and prints hora-inspect's report of\n"
    "them: the call each rank is in and what it waits for, the ranks in no call. hora-run\n"
    "prints that report itself on stderr when --timeout stops the job, and on SIGUSR1.\n"
    "\n"
    "options:\n"
    "  -n N, -np N    number of ranks, 1 to 1024\n"
    "  --timeout S    stop all ranks after S seconds (may be fractional) and exit 124, after\n"
    "                 printing the report of their calls\n"
    "  --bind core    pin each rank to one CPU hora-run may use, the first hyperthread of\n"
    "                 every core before any core's second (the default when there are at\n"
    "                 least N CPUs)\n"
    "  --bind numa    bind rank r to the CPUs hora-run may use on NUMA node r mod (nodes)\n"
    "  --bind none    leave placement to the kernel (the default when ranks outnumber CPUs)\n"
    "  --no-prefix    pass output lines through unchanged\n"
    "  --status [PID] the report of a running job's calls; --json: as JSON\n"
    "  -h, --help     show this text\n"
    "  --             end of options\n";

enum class ParseOutcome { Run, Help, Error };

struct Options {
  ParseOutcome outcome = ParseOutcome::Error;
  std::string error;  // why, when outcome is Error
  int nranks = 0;
  double timeoutS = 0;
  std::string timeoutText;
  bool prefix = true;
  std::optional<BindMode> bind;  // --bind, if given
  std::vector<std::string> argv;
};

std::optional<long> parseInteger(const std::string& text) {
  if (text.empty()) return std::nullopt;
  errno = 0;
  char* end = nullptr;
  long value = std::strtol(text.c_str(), &end, 10);
  if (errno != 0 || *end != '\0') return std::nullopt;
  return value;
}

// A number of seconds: finite, >= 0 and at most kMaxSeconds.
std::optional<double> parseSeconds(const std::string& text) {
  if (text.empty()) return std::nullopt;
  errno = 0;
  char* end = nullptr;
  double value = std::strtod(text.c_str(), &end);
  if (errno != 0 || *end != '\0' || !std::isfinite(value) || value < 0 || value > kMaxSeconds)
    return std::nullopt;
  return value;
}

Options usageError(const std::string& message) {
  Options options;
  options.outcome = ParseOutcome::Error;
  options.error = message;
  return options;
}

// The value of an option: what follows its name in the same argument ("-n4",
// "--timeout=2"), or else the next argument.
std::optional<std::string> optionValue(const std::vector<std::string>& args, size_t& i,
                                       const std::string& attached) {
  if (!attached.empty()) return attached;
  if (i + 1 >= args.size()) return std::nullopt;
  return args[++i];
}

bool startsWith(const std::string& text, const char* prefix) {
  return text.rfind(prefix, 0) == 0;
}

std::optional<BindMode> parseBind(const std::string& text) {
  if (text == "core") return BindMode::Core;
  if (text == "numa") return BindMode::Numa;
  if (text == "none") return BindMode::None;
  return std::nullopt;
}

Options parseOptions(const std::vector<std::string>& args) {
  Options options;
  bool haveRanks = false;
  size_t i = 0;
  for (; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--") {
      ++i;
      break;
    }
    if (arg == "-h" || arg == "--help") {
      options.outcome = ParseOutcome::Help;
      return options;
    }
    if (arg == "--no-prefix") {
      options.prefix = false;
    } else if (arg == "--bind" || startsWith(arg, "--bind=")) {
      std::string attached = arg == "--bind" ? "" : arg.substr(7);
      std::optional<std::string> value = optionValue(args, i, attached);
      options.bind = value ? parseBind(*value) : std::nullopt;
      if (!options.bind) return usageError("option --bind takes core, numa or none");
    } else if (startsWith(arg, "-n")) {
      std::string attached = arg.substr(startsWith(arg, "-np") ? 3 : 2);
      std::optional<std::string> value = optionValue(args, i, attached);
      if (!value) return usageError("option -n needs a value");
      std::optional<long> n = parseInteger(*value);
      if (!n || *n < 1 || *n > kMaxRanks)
        return usageError("the number of ranks must be 1 to 1024, not '" + *value + "'");
      options.nranks = static_cast<int>(*n);
      haveRanks = true;
    } else if (arg == "--timeout" || startsWith(arg, "--timeout=")) {
      std::string attached = arg == "--timeout" ? "" : arg.substr(10);
      std::optional<std::string> value = optionValue(args, i, attached);
      if (!value) return usageError("option --timeout needs a value");
      std::optional<double> seconds = parseSeconds(*value);
      if (!seconds || *seconds <= 0)
        return usageError("the timeout must be a positive number of seconds, not '" + *value + "'");
      options.timeoutS = *seconds;
      options.timeoutText = *value;
    } else if (arg.size() > 1 && arg[0] == '-') {
      return usageError("unknown option '" + arg + "'");
    } else {
      break;
    }
  }
  if (!haveRanks) return usageError("missing -n N");
  if (i >= args.size()) return usageError("missing PROGRAM");
  options.argv.assign(args.begin() + static_cast<std::ptrdiff_t>(i), args.end());
  options.outcome = ParseOutcome::Run;
  return options;
}

// Children get pipes on 1 and 2 with dup2; that needs 0, 1 and 2 to be taken already, or a
// pipe could land on one of them. Give any that is closed /dev/null.
void ensureStandardFds() {
  for (int fd = 0; fd <= 2; ++fd) {
    if (fcntl(fd, F_GETFD) >= 0 || errno != EBADF) continue;
    // Lands on fd (the lowest free one). Children get their own 0-2 by dup2 anyway.
    int opened = open("/dev/null", (fd == 0 ? O_RDONLY : O_WRONLY) | O_CLOEXEC);
    if (opened >= 0 && opened != fd) close(opened);
  }
}

double graceFromEnvironment() {
  const char* text = std::getenv("HORA_RUN_GRACE_S");
  if (text == nullptr || *text == '\0') return kDefaultGraceS;
  std::optional<double> seconds = parseSeconds(text);
  if (seconds) return *seconds;
  printError(std::string("ignoring HORA_RUN_GRACE_S='") + text + "': not a number of seconds");
  return kDefaultGraceS;
}

// --bind's default: HORA_RUN_BIND, else Auto.
BindMode bindFromEnvironment() {
  const char* text = std::getenv("HORA_RUN_BIND");
  if (text == nullptr || *text == '\0') return BindMode::Auto;
  std::optional<BindMode> bind = parseBind(text);
  if (bind) return *bind;
  printError(std::string("ignoring HORA_RUN_BIND='") + text + "': expected core, numa or none");
  return BindMode::Auto;
}

bool isRankVariable(const char* entry) {
  static const char* const kNames[] = {"HORA_ID=", "HORA_RANK=", "HORA_SIZE=", "HORA_LOCAL_RANK=",
                                       "HORA_LOCAL_SIZE="};
  for (const char* name : kNames) {
    if (std::strncmp(entry, name, std::strlen(name)) == 0) return true;
  }
  return false;
}

std::vector<std::string> environmentWithoutRankVariables() {
  std::vector<std::string> env;
  for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry) {
    if (!isRankVariable(*entry)) env.emplace_back(*entry);
  }
  return env;
}

// The ranks' HORA_DUMP_DIR, absolute: hora-run's own (relative to its working directory), else
// its working directory. Set in env.
std::string dumpDirectory(std::vector<std::string>& env) {
  char cwd[4096];
  const std::string here = getcwd(cwd, sizeof cwd) ? cwd : ".";
  const char* given = std::getenv("HORA_DUMP_DIR");
  std::string dir = given && *given ? given : here;
  if (dir[0] != '/') dir = here + "/" + dir;
  for (std::string& e : env)
    if (e.rfind("HORA_DUMP_DIR=", 0) == 0) {
      e = "HORA_DUMP_DIR=" + dir;
      return dir;
    }
  env.push_back("HORA_DUMP_DIR=" + dir);
  return dir;
}

std::string toHex(const horaUniqueId& id) {
  static const char kDigits[] = "0123456789abcdef";
  std::string hex;
  hex.reserve(2 * sizeof(id.internal));
  for (char c : id.internal) {
    unsigned byte = static_cast<unsigned char>(c);
    hex += kDigits[byte >> 4];
    hex += kDigits[byte & 0xf];
  }
  return hex;
}

// Makes the id and, inside this process, the listener the ranks contact.
std::optional<std::string> makeUniqueId() {
  horaUniqueId id;
  std::memset(&id, 0, sizeof(id));
  horaResult_t result = horaGetUniqueId(&id);
  if (result == horaSuccess) return toHex(id);
  const char* text = horaGetLastError(nullptr);
  printError(text != nullptr && *text != '\0' ? text : horaGetErrorString(result));
  return std::nullopt;
}

// hora-run --status [PID] [--json]
int runStatus(const std::vector<std::string>& args) {
  std::string which;
  bool json = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--status") continue;
    if (a.rfind("--status=", 0) == 0) {
      which = a.substr(9);
    } else if (a == "--json") {
      json = true;
    } else if (which.empty() && parseInteger(a) && *parseInteger(a) > 0) {
      which = a;
    } else {
      printError("--status takes a pid and --json, not '" + a + "'");
      writeAll(STDERR_FILENO, kUsage, sizeof(kUsage) - 1);
      return 2;
    }
  }
  return statusMain(which, json, 5.0);
}

int runMain(int argc, char** argv) {
  ensureStandardFds();
  if (argc > 1 && (std::strcmp(argv[1], "--status") == 0 || std::strncmp(argv[1], "--status=", 9) == 0))
    return runStatus(std::vector<std::string>(argv + 1, argv + argc));
  Options options = parseOptions(std::vector<std::string>(argv + 1, argv + argc));
  if (options.outcome == ParseOutcome::Help) {
    writeAll(STDOUT_FILENO, kUsage, sizeof(kUsage) - 1);
    return 0;
  }
  if (options.outcome == ParseOutcome::Error) {
    printError(options.error);
    writeAll(STDERR_FILENO, kUsage, sizeof(kUsage) - 1);
    return 2;
  }
  JobSpec spec;
  spec.nranks = options.nranks;
  spec.argv = options.argv;
  spec.baseEnv = environmentWithoutRankVariables();
  spec.dumpDir = dumpDirectory(spec.baseEnv);
  spec.timeoutS = options.timeoutS;
  spec.timeoutText = options.timeoutText;
  spec.graceS = graceFromEnvironment();
  spec.prefix = options.prefix;
  // Holds the claim on the ranks' CPUs until hora-run exits.
  Placement placement = placeRanks(options.nranks, options.bind ? *options.bind : bindFromEnvironment());
  spec.cpus = placement.cpus;
  std::optional<std::string> id = makeUniqueId();
  if (!id) return 1;
  spec.idHex = *id;
  return runJob(spec);
}

}  // namespace

}  // namespace hora::run

// The rendezvous thread that horaGetUniqueId started may still be running (ranks that died
// during init leave it waiting out its timeout); leave without running static destructors
// under it.
int main(int argc, char** argv) {
  int status = hora::run::runMain(argc, argv);
  std::fflush(stdout);
  std::fflush(stderr);
  std::_Exit(status);
}
