// hora-soak --chaos's options.
#include <getopt.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "hora_soak.h"
#include "hora_soak_chaos.h"

namespace hora_soak {
namespace {

const char* kProgram = "hora-soak";

void usage(FILE* out) {
  std::fprintf(out,
      "usage: %s --chaos [options]\n"
      "  -n, --ranks <n>         ranks, one process each, started by hora-soak itself (default 4, at least 2)\n"
      "  -r, --rounds <n>        rounds of calls (default 40 when -t is not given)\n"
      "  -t, --time <seconds>    run for this long (with -r: whichever comes first)\n"
      "  -s, --seed <n>          the seed of the calls, their data and the faults (default 1)\n"
      "  -c, --calls <n>         calls per round (default 8)\n"
      "  -e, --maxbytes <size>   the largest buffer of one rank in one call, bytes (default 65536)\n"
      "      --shrink            after a fault the survivors shrink the communicator and go on;\n"
      "                          without it every rank leaves and new ones start\n"
      "      --timeout-ms <ms>   HORA_TIMEOUT_MS of the ranks: how long a stopped rank takes to be\n"
      "                          noticed (default 4000)\n"
      "      --pause-ms <ms>     how long a pause (SIGSTOP, then SIGCONT) lasts (default 100)\n"
      "      --hosts <H>x<R>     H hosts of R ranks each (instead of -n), network namespaces made by\n"
      "                          hora-soak (root, iproute2); faults also cut a host's link\n"
      "  -v, --verbose           a line per round and per fault\n"
      "The ranks' logs and flight-recorder dumps go to HORA_DUMP_DIR (default: a new directory in\n"
      "TMPDIR, printed). Exit status: 0 when every survivor's error named the culprit, no call failed\n"
      "without a fault and no result was wrong; 1 otherwise; 2 on bad usage; 77 when --hosts cannot\n"
      "make namespaces here.\n",
      kProgram);
}

[[noreturn]] void badUsage(const std::string& what) {
  std::fprintf(stderr, "%s: %s\n", kProgram, what.c_str());
  usage(stderr);
  std::exit(2);
}

uint64_t number(const char* text, uint64_t lo, uint64_t hi, const char* name) {
  uint64_t v = 0;
  if (!parseUnsigned(text, lo, hi, &v)) badUsage(std::string("bad value for ") + name + " '" + text + "'");
  return v;
}

}  // namespace

ChaosOptions parseChaos(int argc, char** argv) {
  ChaosOptions o;
  bool ranksGiven = false;
  enum { kChaos = 256, kShrink, kTimeout, kPause, kHosts };
  static const option longOpts[] = {
      {"chaos", no_argument, nullptr, kChaos},        {"ranks", required_argument, nullptr, 'n'},
      {"rounds", required_argument, nullptr, 'r'},    {"time", required_argument, nullptr, 't'},
      {"seed", required_argument, nullptr, 's'},      {"calls", required_argument, nullptr, 'c'},
      {"maxbytes", required_argument, nullptr, 'e'},  {"shrink", no_argument, nullptr, kShrink},
      {"timeout-ms", required_argument, nullptr, kTimeout}, {"pause-ms", required_argument, nullptr, kPause},
      {"verbose", no_argument, nullptr, 'v'},         {"help", no_argument, nullptr, 'h'},
      {"hosts", required_argument, nullptr, kHosts},
      {nullptr, 0, nullptr, 0}};
  opterr = 0;
  int c;
  while ((c = getopt_long(argc, argv, ":n:r:t:s:c:e:vh", longOpts, nullptr)) != -1) {
    switch (c) {
      case kChaos: break;
      case 'n': o.ranks = static_cast<int>(number(optarg, 2, 64, "-n")), ranksGiven = true; break;
      case 'r': o.rounds = number(optarg, 1, UINT64_MAX, "-r"); break;
      case 't': {
        char* end = nullptr;
        o.seconds = std::strtod(optarg, &end);
        if (end == optarg || *end || !(o.seconds > 0) || o.seconds > 1e9) badUsage(std::string("bad value for -t '") + optarg + "'");
        break;
      }
      case 's': o.seed = number(optarg, 0, UINT64_MAX, "-s"); break;
      case 'c': o.calls = number(optarg, 1, 100000, "-c"); break;
      case 'e': o.maxBytes = number(optarg, 0, uint64_t{1} << 30, "-e"); break;
      case kShrink: o.shrink = true; break;
      case kTimeout: o.timeoutMs = static_cast<long>(number(optarg, 100, 3600000, "--timeout-ms")); break;
      case kPause: o.pauseMs = static_cast<long>(number(optarg, 0, 3600000, "--pause-ms")); break;
      case 'v': o.verbose = true; break;
      case kHosts: {
        const char* x = std::strchr(optarg, 'x');
        uint64_t h = 0, r = 0;
        if (!x || !parseUnsigned(std::string(optarg, static_cast<size_t>(x - optarg)).c_str(), 2, 16, &h) || !parseUnsigned(x + 1, 1, 16, &r))
          badUsage(std::string("bad value for --hosts '") + optarg + "' (HxR: 2 to 16 hosts of 1 to 16 ranks)");
        o.hosts = static_cast<int>(h);
        o.ranks = static_cast<int>(h * r);
        break;
      }
      case 'h': usage(stdout); std::exit(0);
      default: {
        std::string name = optopt > 0 && optopt < 128 ? std::string("-") + static_cast<char>(optopt) : argv[optind - 1];
        badUsage((c == ':' ? "option needs a value: " : "unknown option ") + name);
      }
    }
  }
  if (optind < argc) badUsage(std::string("unexpected argument '") + argv[optind] + "'");
  if (o.hosts && ranksGiven) badUsage("-n and --hosts exclude each other (--hosts HxR makes H*R ranks)");
  if (o.rounds == 0 && o.seconds == 0) o.rounds = 40;
  return o;
}

}  // namespace hora_soak
