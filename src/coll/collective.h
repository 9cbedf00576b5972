// What one collective call asks for, after the C ABI has checked it, and the entry point that
// turns it into this rank's program.
#pragma once
#include <functional>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "base/types.h"
#include "core/program.h"
#include "kernels/cpu/reduce.h"
#include "transports/stage.h"

namespace hora::coll {

enum class Kind : uint8_t {
  AllReduce = 1,
  Broadcast = 2,
  Reduce = 3,
  AllGather = 4,
  ReduceScatter = 5,
  Send = 6,
  Recv = 7,
  AllToAll = 8,
  Barrier = 9,
  Gather = 10,   // to the root: rank i's block lands at i * count of its recvbuf
  Scatter = 11,  // from the root: block i of its sendbuf goes to rank i
};
const char* kindName(Kind k);

struct Args {
  Kind kind = Kind::AllReduce;
  const void* sendbuf = nullptr;
  void* recvbuf = nullptr;
  size_t count = 0;  // per the ABI: recvcount for ReduceScatter, sendcount for AllGather, per rank for AllToAll,
                     // Gather and Scatter (the root's big buffer holds nranks * count)
  DataType dtype = DataType::Float32;
  RedOp op = RedOp::Sum;
  kernels::Scalar scalar{0.0};  // PreMulSum's scalar, in the type's domain
  // PreMulSum's scalar in memory, read as the call runs (horaScalarDevice): set until then
  // (device::readScalars), null once `scalar` holds it.
  const void* scalarAt = nullptr;
  int root = 0;                 // Broadcast, Reduce, Gather, Scatter
  int peer = -1;                // Send, Recv
  // Avg: how many ranks' inputs the sum divides by (0: the ranks the call runs on). A phase of
  // a hierarchical algorithm runs on some ranks but divides by all of them.
  int divideBy = 0;
  // Device buffers through the CUDA IPC stage (comm/device.h): tagged apart from a host call,
  // so that ranks that disagree on where the buffers are fail instead of reading each other's
  // regions of two different stages.
  bool deviceIpc = false;
};

// The algorithms' names, one typed table (algorithms.def; the objects are in algorithm.h).
enum class Algo : uint8_t {
#define HORA_ALGORITHM(id, name) id,
#include "coll/algorithms.def"
#undef HORA_ALGORITHM
};

// How to run it: chosen by the planner (planner.h).
struct Plan {
  Algo algo = Algo::Ring;
  size_t chunkBytes = 512 * 1024;
  int slots = 4;  // staging buffers per pipeline
  // For an algorithm made of phases (hier): the algorithm of its phase between hosts, chosen
  // by the planner (Algorithm::refine).
  Algo inner = Algo::Ring;
};

// What a message (or a flag) costs on a link: the planner's cost model (cost.h).
struct LinkCost {
  double latencyUs = 1;  // one message, or one flag, from post to seen
  double gbps = 1;       // bytes per ns one rank moves over it
};

// Which ranks share a host: hosts[h] lists host h's ranks in rank order; hosts are numbered
// in the order of their lowest rank. hostOf[r] and localIndex[r] place rank r.
struct HostLayout {
  std::vector<std::vector<int>> hosts;
  std::vector<int> hostOf, localIndex;
  // From each rank's host number (any labels): the layout. Same on every rank.
  static HostLayout fromLabels(const std::vector<int>& label);
  // Every host has the same number of ranks.
  bool uniform() const;
  // Each host's ranks are consecutive, in host order (0..L-1 on the first, ...).
  bool consecutive() const;
  // The ranks host by host: the order in which a ring crosses each host's link once each way.
  std::vector<int> hostOrder() const;
  // When every rank r < senders sends to rank partner(r) at once (a step of recursive doubling
  // or Bruck's): the most ranks of one host whose partner is on another host, who share that
  // host's link (at least 1). Same on every rank.
  template <class Partner>
  int crossingAtOnce(int senders, Partner partner) const {
    std::vector<int> crossing(hosts.size(), 0);
    const int n = static_cast<int>(hostOf.size());
    for (int r = 0; r < senders && r < n; ++r) {
      const int to = partner(r);
      if (to >= 0 && to < n && hostOf[r] != hostOf[to]) ++crossing[hostOf[r]];
    }
    int most = 1;
    for (int c : crossing) most = c > most ? c : most;
    return most;
  }
};

// What the planner and the algorithms know of the job (horaComm::shape): this rank and the
// ranks, how they spread over hosts and machines, the shared stages, the slowest links. (The
// hosts' hardware itself is src/topo/'s topology.)
struct JobShape {
  int rank = 0;
  int nranks = 1;
  // The shared stage, when every rank of the communicator is a member of it (the stage
  // algorithms); null otherwise.
  const transport::SharedStage* stage = nullptr;
  uint64_t* stageSeq = nullptr;  // the stage's chunk sequence: the stage algorithms advance it
  // What the planner's predictions need: how the ranks spread over hosts, the processing units
  // of the busiest host, and the cost of the slowest link between two ranks.
  int hosts = 1;
  int ranksPerHost = 1;  // on the host with the most
  int coresPerHost = 1;  // of that host
  // The most ranks on one machine (one kernel): more than ranksPerHost when hosts are network
  // namespaces of one machine, whose ranks share its cores. 0: ranksPerHost.
  int ranksPerMachine = 0;
  LinkCost slowest{0.1, 20};
  // Across hosts: which rank is where (null when every rank is on one host), and the slowest
  // link between two ranks of one host (slowest is then the slowest between hosts).
  const HostLayout* layout = nullptr;
  LinkCost local{0.1, 20};
  // Across hosts, the shared stage of this rank's host when it holds every rank of the host
  // (members in rank order), for the phases within the host; null otherwise.
  const transport::SharedStage* hostStage = nullptr;
  uint64_t* hostStageSeq = nullptr;
  // HORA_CALL_CHECK: calls whose ranks would not all hear from every other (a Broadcast's
  // root, ...) make them (coll/build.cc, the shared stage's one-step calls).
  bool callCheck = true;
  // Whether every rank on this machine has a CPU of its own, so that a wait may spin a while
  // without holding a core that a peer needs (Waiter::kSpinWhenAlone).
  bool spins = false;
};

// For an algorithm that runs a lone call at once through the shared stage (algorithm.h):
// await(counter, value, only, check) waits until every member of the stage (or only member
// `only`, if not -1) has set the counter to at least value, and then (with check) compares the
// call with theirs. A reference to the caller's callable (two words, no allocation, no manager),
// valid for the call it is passed to: it is made and used on every small call. With it, the
// call's number and tag as this rank announced them (callNo 0: none), which the algorithm may
// compare itself with what its peers wrote beside their data (the stage's notes), instead of
// waiting.
class AwaitFn {
 public:
  template <class F>
  AwaitFn(F& f, uint64_t callNo = 0, uint64_t callTag = 0)  // NOLINT: made from the caller's lambda, implicitly
      : obj_(&f),
        call_([](void* o, int counter, uint64_t value, int only, bool check) {
          (*static_cast<F*>(o))(counter, value, only, check);
        }),
        callNo_(callNo),
        callTag_(callTag) {}
  void operator()(int counter, uint64_t value, int only, bool check) const { call_(obj_, counter, value, only, check); }
  uint64_t callNo() const { return callNo_; }
  uint64_t callTag() const { return callTag_; }

 private:
  void* obj_;
  void (*call_)(void*, int, uint64_t, int, bool);
  uint64_t callNo_, callTag_;
};

// Appends this rank's ops for `a`, by the plan's algorithm, to `out` and sets its tag.
void build(const Args& a, const JobShape& t, const Plan& plan, core::Scratch& scratch, core::Program& out);
// Whether a rank of the call may finish without having heard, through checked messages, from
// every other, so that its call is compared with its predecessor's later (comm/call_check.h):
// a Broadcast, a Reduce, a Gather, a Scatter, a call with nothing to move (HORA_CALL_CHECK; see
// build.cc).
bool needsAgreement(const Args& a, const JobShape& t);
// That comparison over the links: the call's check, a one-byte message tagged `tag` to the
// successor (rank + 1), in a program of its own that runs after the communicator's other jobs
// of a call or group; and its receipt from the predecessor, in a later call.
void buildCheckSend(const JobShape& t, uint64_t tag, core::Scratch& scratch, core::Program& out);
void buildCheckRecv(const JobShape& t, uint64_t tag, core::Scratch& scratch, core::Program& out);
// One more check received in the same program (a batch of them, in order): its own tag and frame
// number on the op, where the program's are its first's.
void addCheckRecv(const JobShape& t, uint64_t tag, uint16_t call, core::Scratch& scratch, core::Program& out);
// A meeting of every rank (a dissemination barrier), its messages tagged `tag`: on leaving it a
// rank has heard, through checked messages, from every other (horaCommFinalize's).
void buildAgreement(const JobShape& t, uint64_t tag, core::Scratch& scratch, core::Program& out);
// Whether a lone call run at once through the stage leaves some rank without having compared
// its call with every other's (a small rooted call through the stage's cells, src/coll/stage_now.cc),
// so that the ranks compare it later with their predecessor's (HORA_CALL_CHECK; run.cc).
bool stageChecksLater(const Args& a, const JobShape& t);

// The tag every message of the call carries, and its description.
uint64_t makeTag(const Args& a);
// One tag for the collectives a rank runs on one communicator in one group, in order.
inline constexpr uint64_t kGroupKind = 0xfe;
uint64_t groupTag(const std::vector<uint64_t>& tags);
std::string describeTag(uint64_t tag);
std::string describe(const Args& a);

}  // namespace hora::coll
