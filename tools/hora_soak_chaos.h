// hora-soak --chaos's parts (hora_soak_chaos.cc, the controller): the lines it exchanges with its
// ranks and the rank itself (hora_soak_chaos_rank.cc), and the hosts of its multi-host mode
// (hora_soak_hosts.cc).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace hora_soak {

// hora-soak --chaos's options (hora_soak_chaos_options.cc parses them).
struct ChaosOptions {
  int ranks = 4;             // -n
  uint64_t rounds = 0;       // -r; 0: none
  double seconds = 0;        // -t; neither: -r 40
  uint64_t seed = 1;         // -s
  bool shrink = false;       // --shrink
  uint64_t calls = 8;        // -c: calls per round
  size_t maxBytes = 64 << 10;  // -e
  long timeoutMs = 4000;     // --timeout-ms: HORA_TIMEOUT_MS of the ranks
  long pauseMs = 100;        // --pause-ms
  bool verbose = false;      // -v: one line per round and fault
  int hosts = 0;             // --hosts HxR: H hosts (0: the ranks are local, no namespaces)
};

// Parses them, or exits (0 after --help, 2 with the usage on a bad one).
ChaosOptions parseChaos(int argc, char** argv);

// s with its line breaks made spaces.
std::string oneLine(std::string s);
// Writes line and a newline to fd. False when the other end has gone.
bool writeLine(int fd, const std::string& line);
// A line from fd (buffered in buf), waiting until deadline. False on EOF, error or time out.
bool readLine(int fd, std::string& buf, std::string* line, std::chrono::steady_clock::time_point deadline);

// A rank of the chaos soak (hora-soak --chaos-rank): joins the communicator its environment
// names and obeys the controller's lines on fd 3.
int rankMain();

// The hosts of the multi-host mode: network namespaces this process makes (root, iproute2's
// `ip`), all on one bridge in a namespace of its own, as tools/hora-netns makes them: host h is
// namespace <prefix>h<h>, its eth0 at 10.215.0.<h+1>/24, its cable c<h> on the bridge. Removed
// by remove(), by the destructor, and on SIGINT, SIGTERM and SIGHUP (then the process exits).
class Hosts {
 public:
  enum class Made { Yes, Cannot, Failed };  // Cannot: no namespaces here (no root, no `ip`)
  Made make(int hosts, std::string* why);
  ~Hosts() { remove(); }
  void remove();  // idempotent
  void unmount() const;  // remove()'s part that a signal handler runs: async-signal-safe calls

  int count() const { return static_cast<int>(fds_.size()); }
  const std::string& prefix() const { return prefix_; }
  const std::string& name(int h) const { return names_[static_cast<size_t>(h)]; }  // also its host name
  std::string address(int h) const { return "10.215.0." + std::to_string(h + 1); }
  // Takes host h's cable out (up false) or puts it back. False (why says) when `ip` fails.
  bool link(int h, bool up, std::string* why);
  // In a child of fork, before exec: moves it to host h (its network namespace, and a UTS
  // namespace of its own named as the host). Only async-signal-safe calls.
  bool enter(int h) const;

 private:
  bool ip(const std::vector<std::string>& args, std::string* why);
  std::string prefix_;
  std::vector<int> fds_;           // each host's namespace, open
  std::vector<std::string> made_;  // the namespaces made, /run/netns/<name>
  std::vector<std::string> names_;  // the hosts' namespaces (and host names): <prefix>h<h>
};

}  // namespace hora_soak
