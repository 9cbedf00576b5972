// The planner's cost model: what a message, a wait and a byte cost on this job's links, from
// which every algorithm predicts its time (algorithm.h), as NCCL's tuning model does with its
// latency and bandwidth tables. The defaults were measured on a 2-core VM (perf/allreduce_perf
// with each algorithm forced, HORA_ALGO=allreduce:<name>, 2 to 8 ranks over shared memory and
// TCP on loopback) and fitted so that the predicted crossovers fall where the measured ones did;
// `hora-tune` measures them on another machine and writes a file that HORA_TUNE_FILE loads.
//
// Units: microseconds and GB/s (bytes per nanosecond).
#pragma once
#include <algorithm>
#include <cmath>
#include <map>
#include <string>

#include "coll/collective.h"

namespace hora::coll {

struct Costs {
  // The shared stage: a flag's latency, and reading a peer's region (cache lines that live in
  // another core's cache cost more than local memory).
  LinkCost stage{0.3, 36};
  // Bytes of local memory traffic (reads plus writes) per ns: copies and reductions.
  double memoryGBps = 40;
  // A copy between two processes' memory through the kernel (process_vm_readv and _writev, the
  // single copy's between processes): a call's fixed cost and its rate, as measured (the system
  // call and the pinning of the pages about 3 us, 16 KiB in 2.9-3.4; 5-12 GB/s on a core). Which
  // of the single copy and the root's slots is faster at 2 processes depends on the machine:
  // the slots pass every chunk from one core's cache to the other's with a handshake each, the
  // single copy meets its root twice per call. On one 2-core VM the slots were 1.0-1.6x faster
  // in place from 1 MiB and 2.2x out of place at 16 MiB; on another, whose cores pass lines
  // more slowly (busy-waits there often end in a sleep), the single copy was 1.1-1.9x faster in
  // place at 256 KiB and 3-10x from 1 MiB, and took 0.7-1.1x the slots' time out of place. The
  // model takes the single copy at 2 processes (a Broadcast is planned as the root's call in
  // place, where it halves the copy with the root: coll/planner.cc); a tune file's kernelcopy
  // line (which hora-tune does not measure: on the second VM its timings of either path spread
  // too widely to fit) or HORA_ALGO overrides it.
  LinkCost kernelCopy{3, 10};
  // A wait that needs another rank to be scheduled, when a host's ranks outnumber its cores,
  // costs this much more per doubling of ranks per core (8 ranks on 2 cores: 2 doublings).
  double oversubscribedUs = 4.2;
  // Messages, by transport name: each registered transport's own default (its Registration in
  // transports/registry.h), unless a tune file says otherwise.
  std::map<std::string, LinkCost> links;
  // The fixed cost of each algorithm beyond its waits (building and running its program), by
  // algorithm name. Direct's n-1 simultaneous messages contend for the link and the cores more
  // than its count of waits says: at 3 ranks over TCP it took 43 us against recursive
  // doubling's 40 at 8 bytes, and 81 against 67 at 32 KiB.
  // On one host the logarithmic AllGathers and the binomial Broadcast measured no faster than
  // the ring and the chain they would replace (8 and 4 ranks on 2 cores: the spread of repeated
  // runs was wider than any difference), so their fixed costs keep those picks there; across
  // hosts their fewer waits outweigh it from about 4 ranks. The hierarchical algorithm's three
  // phases cost more than their waits say for small calls: at 4 hosts of 2 ranks (namespaces of
  // a 2-core machine) it took 310 us at 4 KiB and 398 at 32 KiB against recursive doubling's
  // 284 and 381, and it pays from about 256 KiB (1205 us against 1801). Its Broadcast, fitted to
  // the times measured there (coll/fit.h; tests/test_planner.cc), costs 50 us and twice its
  // bytes: the chain beats it to 256 KiB (419 us against 477) and it is within 6% above.
  std::map<std::string, double> baseUs{{"rd", 0.45},    {"ring", 4.7},         {"slice", 10},   {"direct", 10},
                                       {"chain", 0.5},  {"binomial", 1},       {"bruck", 10},   {"rd-allgather", 10},
                                       {"hier", 40},    {"hier-broadcast", 50}};
  // Where the measured time of an algorithm parts from its traffic count, a factor on its
  // bytes' cost, by algorithm name (1 when absent): the flat algorithm's n-way reduction out of
  // n peers' cache lines costs 1.75 times what its traffic says; the ring, whose chunks are
  // reduced as they arrive, while still in cache, 0.6 times (at 2 ranks and 128 MiB: 17 ms for
  // the ring, 27 ms for the slice algorithm, against a traffic count that favours the slice).
  // A Broadcast, which reduces nothing, takes the flat algorithm's plain count (its slots'
  // pipeline at 2 processes: 16 MiB in place in 0.77-1.29 ms against a count of 0.93); so does
  // the ring's AllGather (through memory it forwards each chunk from cache, which coll/ring.cc
  // counts there: over a network its bytes cost what they move, docs/planner.md).
  std::map<std::string, double> byteFactor{
      {"flat", 1.75}, {"flat-broadcast", 1}, {"ring", 0.6}, {"ring-allgather", 1}, {"hier-broadcast", 2.08}};

  Costs();
  // An algorithm's fixed cost and bytes' factor for a collective: the key "ALGO-COLLECTIVE"
  // (costKey: "tree-allreduce"), else "ALGO", else 0 and 1.
  double base(const char* algo, Kind k) const;
  double factor(const char* algo, Kind k) const;
  const LinkCost& link(const std::string& transport) const;
};

// "ALGO-COLLECTIVE", the collective's name in lower case: the key of an algorithm's costs for
// one collective (Costs::base, coll/fit.h).
std::string costKey(const char* algo, Kind k);

// Ranks per core on the busiest host (at least 1): how much the cores are shared.
inline double sharing(const JobShape& t) {
  return std::max(1.0, static_cast<double>(std::max(t.ranksPerHost, t.ranksPerMachine)) / std::max(1, t.coresPerHost));
}
// One wait on a link, when the rank waited for may first have to be scheduled.
inline double waitUs(const LinkCost& l, const JobShape& t, const Costs& c) {
  return l.latencyUs + c.oversubscribedUs * std::log2(sharing(t));
}
// Across hosts, a step of recursive doubling over partners r ^ d (r < p) sends the messages of
// several ranks of a host over its one link at once: how many (1 on one host).
inline double sharedLink(const JobShape& t, int p, int d) {
  return t.layout ? t.layout->crossingAtOnce(p, [d](int r) { return r ^ d; }) : 1;
}
// Microseconds to move `bytes` at `gbps`, slowed by cores shared among ranks.
inline double bytesUs(double bytes, double gbps, const JobShape& t) { return sharing(t) * bytes / gbps / 1000.0; }

// The text a tune file holds: one setting per line, `key value...`, '#' comments:
//   stage LATENCY_US GBPS | memory GBPS | kernelcopy US GBPS | oversubscribed US | link NAME LATENCY_US GBPS |
//   base KEY US | bytes KEY FACTOR, KEY an algorithm ("ring") or an algorithm for one collective
//   ("ring-allreduce", costKey)
// Throws Errc::InvalidArgument naming the line on anything else.
Costs parseCosts(const std::string& text, const std::string& source);
std::string formatCosts(const Costs& c);

}  // namespace hora::coll
