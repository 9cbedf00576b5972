// hora-inspect: the report of a job's flight recorder dumps (hora_inspect.h).
//
//   hora-inspect [--json] DIR|FILE...
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "hora_inspect.h"

namespace {

const char kUsage[] =
    "usage: hora-inspect [--json] DIR|FILE...\n"
    "\n"
    "Reads the flight recorder's dumps (hora-dump.<host>.<pid>.json: every such file of each\n"
    "DIR, and each FILE) and says, per communicator: the ranks that failed and why, the call\n"
    "each rank is in with the step it is at and the rank it waits for, the ranks in no call\n"
    "(with their process's state when it runs on this host, or that it is gone), the ranks\n"
    "without a dump, calls that differ across ranks under one number, and the last call each\n"
    "rank completed. A process writes its dump when a communicator fails, on SIGUSR1, and when\n"
    "it calls horaCommDump; hora-run --status asks a running job for them.\n"
    "\n"
    "options:\n"
    "  --json      one JSON object instead of the text\n"
    "  -h, --help  show this text\n"
    "\n"
    "exit status: 0 with a report; 1 when no dump could be read; 2 for a usage error\n";

}  // namespace

int main(int argc, char** argv) {
  bool json = false;
  std::vector<std::string> paths;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "-h" || a == "--help") {
      fputs(kUsage, stdout);
      return 0;
    }
    if (a == "--json") {
      json = true;
    } else if (a.size() > 1 && a[0] == '-') {
      fprintf(stderr, "hora-inspect: unknown option '%s'\n%s", a.c_str(), kUsage);
      return 2;
    } else {
      paths.push_back(a);
    }
  }
  if (paths.empty()) {
    fprintf(stderr, "hora-inspect: no directory or file given\n%s", kUsage);
    return 2;
  }
  std::vector<std::string> problems;
  const std::vector<hora::inspect::Communicator> comms = hora::inspect::load(paths, &problems);
  const std::string out = json ? hora::inspect::reportJson(comms, problems) : hora::inspect::reportText(comms, problems);
  fputs(out.c_str(), stdout);
  return comms.empty() ? 1 : 0;
}
