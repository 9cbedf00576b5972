// Hierarchical collectives, for ranks on several hosts: a phase among the ranks of each host,
// a phase between hosts, and a phase among each host's ranks again, so that the slow links
// between hosts carry each byte as few times as possible while the fast ones within a host
// carry the rest.
//
// Terms. H hosts with L ranks each (the layout must be uniform); rank r is local rank i of host
// h. Team i is the H ranks of local index i, one per host, ordered by host. A buffer of N
// elements is cut into L slices (segment()), and local rank i is in charge of slice i: every
// local rank takes its slice of the phase between hosts, as NCCL runs one channel per local
// rank, so every rank's link and core work, not one leader's.
//
// AllReduce    1. within the host, slice j of every input goes to local rank j, which reduces
//                 the L of them in local order (a direct reduce-scatter: one step);
//              2. team i all-reduces slice i between hosts, with the algorithm the planner
//                 picks for a call of N/L elements on H ranks (Plan::inner);
//              3. within the host, local rank i sends its reduced slice to the others.
//              Between hosts each rank moves what an all-reduce of N/L moves among H ranks
//              (ring: 2(H-1)/H * N/L each way); within the host, 2(L-1)/L * N.
// Broadcast    1. the root hands slice j to local rank j of its host; 2. team j broadcasts
//              slice j from the root's host; 3. within each host, the slices are exchanged.
// Reduce       1. as AllReduce; 2. team i reduces slice i to the root's host; 3. there, the
//              local ranks hand their slices to the root.
// AllGather    1. team i gathers the inputs of local rank i of every host between hosts;
//              2. within the host, each local rank hands what it gathered to the others.
// ReduceScatter 1. within the host, local rank j gets and reduces the blocks of team j's
//              ranks (H blocks of N); 2. team j reduce-scatters them between hosts.
//
// Reductions: every rank scales its own input once (PreMulSum) before anything is sent, phases
// reduce with the call's op, and Avg divides once, in the phase between hosts, by the ranks of
// the whole call (Args::divideBy). Every element is reduced in one fixed order (local ranks in
// order, then the inner algorithm's), so every rank gets the same bits.
//
// The phase between hosts is built by the inner algorithm for the team as if the team were the
// whole communicator, and spliced into this rank's program with its peers renamed (splice()):
// any algorithm that uses only send and receive can run on a team.
#include <algorithm>

#include "base/error.h"
#include "coll/algorithm.h"
#include "coll/common.h"

namespace hora::coll {

using core::Deps;
using core::ProgramBuilder;
using core::reduceAction;

HostLayout HostLayout::fromLabels(const std::vector<int>& label) {
  HostLayout l;
  std::vector<int> seen;
  l.hostOf.resize(label.size());
  l.localIndex.resize(label.size());
  for (size_t r = 0; r < label.size(); ++r) {
    auto it = std::find(seen.begin(), seen.end(), label[r]);
    const size_t h = static_cast<size_t>(it - seen.begin());
    if (it == seen.end()) {
      seen.push_back(label[r]);
      l.hosts.emplace_back();
    }
    l.hostOf[r] = static_cast<int>(h);
    l.localIndex[r] = static_cast<int>(l.hosts[h].size());
    l.hosts[h].push_back(static_cast<int>(r));
  }
  return l;
}

bool HostLayout::uniform() const {
  for (const auto& h : hosts)
    if (h.size() != hosts[0].size()) return false;
  return !hosts.empty();
}

bool HostLayout::consecutive() const {
  int next = 0;
  for (const auto& h : hosts)
    for (int r : h)
      if (r != next++) return false;
  return true;
}

std::vector<int> HostLayout::hostOrder() const {
  std::vector<int> order;
  for (const auto& h : hosts) order.insert(order.end(), h.begin(), h.end());
  return order;
}

int32_t buildOnTeam(const Algorithm& algo, const Args& sub, const int* team, size_t teamSize, int me, const Plan& p,
                    core::Scratch& scratch, ProgramBuilder& b, int32_t gate) {
  // Reused: programs are built on every call, and a team's never contains another team's.
  static thread_local core::Program prog;
  prog.clear();
  ProgramBuilder sb(prog);
  JobShape t;
  t.rank = me;
  t.nranks = static_cast<int>(teamSize);
  algo.build(sub, t, p, scratch, sb);
  if (prog.ops.empty()) return gate;
  const int32_t first = b.splice(prog, team, gate);
  return b.join(first, static_cast<int32_t>(b.size()));
}

bool buildInHostOrder(const Algorithm& algo, const Args& a, const JobShape& t, const Plan& p, core::Scratch& s,
                      ProgramBuilder& b) {
  if (!t.layout || t.layout->consecutive()) return false;
  // The ranks host by host (HostLayout::hostOrder), in scratch: a call allocates nothing.
  const size_t n = t.layout->hostOf.size();
  int* const order = s.array<int>(n, 0);
  size_t k0 = 0;
  for (const auto& h : t.layout->hosts)
    for (int r : h) order[k0++] = r;
  Args sub = a;
  const int me = static_cast<int>(std::find(order, order + n, t.rank) - order);
  if (a.kind == Kind::Broadcast || a.kind == Kind::Reduce)
    sub.root = static_cast<int>(std::find(order, order + n, a.root) - order);
  // The result blocks of AllGather and the input blocks of ReduceScatter are in rank order;
  // in host order, the team's block k belongs to rank order[k]: they go through a copy of the
  // buffer in host order (one local pass over it, against n-1 crossings of a slow link).
  const size_t E = dataTypeSize(a.dtype), N = a.count;
  if (a.kind == Kind::AllGather && N) {
    uint8_t* gathered = static_cast<uint8_t*>(s.get(n * N * E));
    sub.recvbuf = gathered;
    const int32_t done = buildOnTeam(algo, sub, order, n, me, p, s, b, -1);
    for (size_t k = 0; k < n; ++k)
      b.local(core::reduceAction(at(a.recvbuf, static_cast<size_t>(order[k]) * N, E), gathered + k * N * E, nullptr, N,
                                 Reducer{a, 1}.spec(false, false)),
              core::Deps{done});
    return true;
  }
  if (a.kind == Kind::ReduceScatter && N) {
    uint8_t* packed = static_cast<uint8_t*>(s.get(n * N * E));
    const int32_t first = static_cast<int32_t>(b.size());
    for (size_t k = 0; k < n; ++k)
      b.local(core::reduceAction(packed + k * N * E, at(a.sendbuf, static_cast<size_t>(order[k]) * N, E), nullptr, N,
                                 Reducer{a, 1}.spec(false, false)));
    // In place, the result overwrites this rank's input block: every block is packed first.
    const int32_t packedAll = b.join(first, static_cast<int32_t>(b.size()));
    sub.sendbuf = packed;
    buildOnTeam(algo, sub, order, n, me, p, s, b, packedAll);
    return true;
  }
  if (a.kind == Kind::AllGather || a.kind == Kind::ReduceScatter) return false;
  buildOnTeam(algo, sub, order, n, me, p, s, b, -1);
  return true;
}

namespace {

struct Place {
  const HostLayout& l;
  int r, h, i, H, L;
  const std::vector<int>& mates;
  int* team;  // team i, by host (in scratch)
  Place(const HostLayout& layout, int rank, core::Scratch& scratch)
      : l(layout),
        r(rank),
        h(layout.hostOf[static_cast<size_t>(rank)]),
        i(layout.localIndex[static_cast<size_t>(rank)]),
        H(static_cast<int>(layout.hosts.size())),
        L(static_cast<int>(layout.hosts[0].size())),
        mates(layout.hosts[static_cast<size_t>(h)]) {
    team = scratch.array<int>(static_cast<size_t>(H), 0);
    for (int g = 0; g < H; ++g) team[g] = l.hosts[static_cast<size_t>(g)][static_cast<size_t>(i)];
  }
};

// The call of the phase between hosts: inputs already scaled (PreMulSum adds them), Avg
// dividing by every rank of the call.
Args innerArgs(const Args& a, int nranks) {
  Args s = a;
  if (a.op == RedOp::PreMulSum) s.op = RedOp::Sum;
  if (a.op == RedOp::Avg) s.divideBy = a.divideBy ? a.divideBy : nranks;
  return s;
}

// This rank's input, scaled once for PreMulSum (a peer does not know this rank's scalar).
const void* scaledInput(const Args& a, size_t count, const Reducer& red, core::Scratch& scratch, ProgramBuilder& b,
                        int32_t* ready) {
  *ready = -1;
  if (!red.scalesInput()) return a.sendbuf;
  void* s = scratch.get(count * dataTypeSize(a.dtype));
  *ready = b.local(reduceAction(s, a.sendbuf, nullptr, count, red.spec(true, false)));
  return s;
}

// Phase 1 of AllReduce and Reduce: slice j of `in` to local rank j; the L slices i reduced in
// local order into acc. Returns the reduction; sent[j] gets the send of slice j.
int32_t reduceSlices(const Args& a, const Place& pl, const void* in, int32_t ready, void* acc, core::Scratch& scratch,
                     ProgramBuilder& b, int32_t* sent) {
  const size_t E = dataTypeSize(a.dtype), N = a.count;
  const Range mine = segment(N, pl.L, pl.i);
  const size_t L = static_cast<size_t>(pl.L);
  for (size_t j = 0; j < L; ++j) sent[j] = -1;
  const void** srcs = scratch.array<const void*>(L, nullptr);
  int32_t* deps = scratch.array<int32_t>(L + 1, -1);
  size_t ndeps = 0;
  deps[ndeps++] = ready;
  for (int j = 0; j < pl.L; ++j) {
    const Range s = segment(N, pl.L, j);
    if (j == pl.i) {
      srcs[static_cast<size_t>(j)] = at(in, mine.begin, E);
      continue;
    }
    if (s.size()) sent[static_cast<size_t>(j)] = b.send(pl.mates[static_cast<size_t>(j)], at(in, s.begin, E), s.size() * E, Deps{ready});
    void* got = scratch.get(mine.size() * E);
    srcs[static_cast<size_t>(j)] = got;
    if (mine.size()) deps[ndeps++] = b.recv(pl.mates[static_cast<size_t>(j)], got, mine.size() * E);
  }
  if (!mine.size() || (pl.L == 1 && in == acc)) return ready;
  Args sum = a;
  if (a.op == RedOp::PreMulSum) sum.op = RedOp::Sum;
  return b.localAll(reduceAction(acc, nullptr, nullptr, mine.size(), Reducer{sum, pl.L}.spec(false, false)), deps, ndeps,
                    srcs, L);
}

// Phase 3 of AllReduce and Broadcast: local rank i's slice (in `buf`, done after `ready`) to
// the other local ranks but `skip`; slice j from local rank j into buf unless this rank is
// `skip`. A receive overwriting slice j waits for before[j] (what last read it).
void exchangeSlices(const Args& a, const Place& pl, void* buf, int32_t ready, int skip,
                    const int32_t* before, ProgramBuilder& b) {
  const size_t E = dataTypeSize(a.dtype), N = a.count;
  const Range mine = segment(N, pl.L, pl.i);
  for (int j = 0; j < pl.L; ++j) {
    const int peer = pl.mates[static_cast<size_t>(j)];
    if (j == pl.i) continue;
    if (mine.size() && peer != skip) b.send(peer, at(buf, mine.begin, E), mine.size() * E, Deps{ready});
    const Range s = segment(N, pl.L, j);
    if (s.size() && pl.r != skip)
      b.recv(peer, at(buf, s.begin, E), s.size() * E, Deps{before ? before[static_cast<size_t>(j)] : -1});
  }
}

void hierAllReducePiece(const Args& a, const JobShape& t, const Plan& p, core::Scratch& scratch, ProgramBuilder& b) {
  const size_t E = dataTypeSize(a.dtype), N = a.count;
  if (N == 0) return;
  const Place pl(*t.layout, t.rank, scratch);
  const Reducer red{a, t.nranks};
  int32_t ready;
  const void* in = scaledInput(a, N, red, scratch, b, &ready);
  const Range mine = segment(N, pl.L, pl.i);
  void* acc = at(a.recvbuf, mine.begin, E);
  int32_t* const sent = scratch.array<int32_t>(static_cast<size_t>(pl.L), -1);
  int32_t reduced = reduceSlices(a, pl, in, ready, acc, scratch, b, sent);
  Args sub = innerArgs(a, t.nranks);
  sub.sendbuf = sub.recvbuf = acc;
  sub.count = mine.size();
  int32_t done = buildOnTeam(algorithm(p.inner), sub, pl.team, static_cast<size_t>(pl.H), pl.h, p, scratch, b, reduced);
  // In place, slice j of the result lands where slice j of the input was sent from.
  exchangeSlices(a, pl, a.recvbuf, done, -1, a.sendbuf == a.recvbuf ? sent : nullptr, b);
}

void hierBroadcastPiece(const Args& a, const JobShape& t, const Plan& p, core::Scratch& scratch, ProgramBuilder& b) {
  const size_t E = dataTypeSize(a.dtype), N = a.count;
  if (N == 0) return;
  const Place pl(*t.layout, t.rank, scratch);
  const int rootHost = pl.l.hostOf[static_cast<size_t>(a.root)];
  const Range mine = segment(N, pl.L, pl.i);
  int32_t have = -1;
  if (t.rank == a.root) {
    if (a.sendbuf != a.recvbuf) have = b.local(reduceAction(a.recvbuf, a.sendbuf, nullptr, N, Reducer{a, 1}.spec(false, false)));
    for (int j = 0; j < pl.L; ++j) {
      const Range s = segment(N, pl.L, j);
      if (j != pl.i && s.size()) b.send(pl.mates[static_cast<size_t>(j)], at(a.sendbuf, s.begin, E), s.size() * E);
    }
  } else if (pl.h == rootHost && mine.size()) {
    have = b.recv(a.root, at(a.recvbuf, mine.begin, E), mine.size() * E);
  }
  Args sub = a;
  sub.sendbuf = sub.recvbuf = at(a.recvbuf, mine.begin, E);
  sub.count = mine.size();
  sub.root = rootHost;
  int32_t done = buildOnTeam(algorithm(p.inner), sub, pl.team, static_cast<size_t>(pl.H), pl.h, p, scratch, b, have);
  exchangeSlices(a, pl, a.recvbuf, done, a.root, nullptr, b);
}

void hierReducePiece(const Args& a, const JobShape& t, const Plan& p, core::Scratch& scratch, ProgramBuilder& b) {
  const size_t E = dataTypeSize(a.dtype), N = a.count;
  if (N == 0) return;
  const Place pl(*t.layout, t.rank, scratch);
  const Reducer red{a, t.nranks};
  const int rootHost = pl.l.hostOf[static_cast<size_t>(a.root)];
  int32_t ready;
  const void* in = scaledInput(a, N, red, scratch, b, &ready);
  const Range mine = segment(N, pl.L, pl.i);
  void* acc = scratch.get(mine.size() * E);
  int32_t* const sent = scratch.array<int32_t>(static_cast<size_t>(pl.L), -1);
  int32_t reduced = reduceSlices(a, pl, in, ready, acc, scratch, b, sent);
  // Team i reduces slice i onto the root's host: into the root's result, or a local rank's
  // staging there; elsewhere nothing is written but acc (the sub-call's non-roots write nothing).
  Args sub = innerArgs(a, t.nranks);
  sub.sendbuf = acc;
  sub.recvbuf = t.rank == a.root ? at(a.recvbuf, mine.begin, E) : pl.h == rootHost ? scratch.get(mine.size() * E) : acc;
  // In place at the root, the input's slice i is acc's source, read before the sub-call runs.
  sub.count = mine.size();
  sub.root = rootHost;
  int32_t done = buildOnTeam(algorithm(p.inner), sub, pl.team, static_cast<size_t>(pl.H), pl.h, p, scratch, b, reduced);
  if (pl.h != rootHost) return;
  if (t.rank != a.root) {
    if (mine.size()) b.send(a.root, sub.recvbuf, mine.size() * E, Deps{done});
    return;
  }
  for (int j = 0; j < pl.L; ++j) {
    const Range s = segment(N, pl.L, j);
    if (j == pl.i || !s.size()) continue;
    // In place, slice j of the input was sent from where its result goes.
    b.recv(pl.mates[static_cast<size_t>(j)], at(a.recvbuf, s.begin, E), s.size() * E,
           Deps{a.sendbuf == a.recvbuf ? sent[static_cast<size_t>(j)] : -1});
  }
}

// AllReduce, Broadcast and Reduce run piece by piece, so that the phases of consecutive pieces
// overlap: while one piece crosses the network, the next is reduced within the host and the one
// before is handed out. A piece is kPieceChunks of the plan's chunks per local rank.
constexpr size_t kPieceChunks = 4;
template <class Body>
void byPieces(const Args& a, const JobShape& t, const Plan& p, core::Scratch& s, ProgramBuilder& b, Body body) {
  const size_t E = dataTypeSize(a.dtype), L = t.layout->hosts[0].size();
  const size_t piece = std::max<size_t>(1, kPieceChunks * L * p.chunkBytes / E);
  for (size_t off = 0; off < a.count || off == 0; off += piece) {
    Args sub = a;
    sub.count = std::min(piece, a.count - off);
    sub.sendbuf = at(a.sendbuf, off, E);
    sub.recvbuf = at(a.recvbuf, off, E);
    body(sub, t, p, s, b);
    if (a.count == 0) break;
  }
}

void hierAllGather(const Args& a, const JobShape& t, const Plan& p, core::Scratch& scratch, ProgramBuilder& b) {
  const size_t E = dataTypeSize(a.dtype), N = a.count, block = N * E;
  if (N == 0) return;
  const Place pl(*t.layout, t.rank, scratch);
  const size_t H = static_cast<size_t>(pl.H);
  // Between hosts: team i gathers its ranks' inputs, by host.
  uint8_t* gathered = static_cast<uint8_t*>(scratch.get(H * block));
  Args sub = a;
  sub.recvbuf = gathered;
  int32_t done = buildOnTeam(algorithm(p.inner), sub, pl.team, static_cast<size_t>(pl.H), pl.h, p, scratch, b, -1);
  const Reducer copy{a, 1};
  auto place = [&](const uint8_t* from, int j, int32_t after) {
    for (size_t g = 0; g < H; ++g) {
      const int owner = pl.l.hosts[g][static_cast<size_t>(j)];
      void* to = at(a.recvbuf, static_cast<size_t>(owner) * N, E);
      if (to != from + g * block) b.local(reduceAction(to, from + g * block, nullptr, N, copy.spec(false, false)), Deps{after});
    }
  };
  place(gathered, pl.i, done);
  // Within the host: what each local rank gathered, to the others.
  for (int j = 0; j < pl.L; ++j) {
    if (j == pl.i) continue;
    const int peer = pl.mates[static_cast<size_t>(j)];
    b.send(peer, gathered, H * block, Deps{done});
    uint8_t* theirs = static_cast<uint8_t*>(scratch.get(H * block));
    place(theirs, j, b.recv(peer, theirs, H * block));
  }
}

void hierReduceScatter(const Args& a, const JobShape& t, const Plan& p, core::Scratch& scratch, ProgramBuilder& b) {
  const size_t E = dataTypeSize(a.dtype), N = a.count, block = N * E;
  if (N == 0) return;
  const Place pl(*t.layout, t.rank, scratch);
  const Reducer red{a, t.nranks};
  const size_t H = static_cast<size_t>(pl.H);
  // Within the host: the blocks of team j's ranks, packed by host (and scaled), to local rank j.
  const void** srcs = scratch.array<const void*>(static_cast<size_t>(pl.L), nullptr);
  int32_t* deps = scratch.array<int32_t>(static_cast<size_t>(pl.L) * (H + 1), -1);
  size_t ndeps = 0;
  for (int j = 0; j < pl.L; ++j) {
    uint8_t* pack = static_cast<uint8_t*>(scratch.get(H * block));
    const auto first = static_cast<int32_t>(b.size());
    for (size_t g = 0; g < H; ++g) {
      const int owner = pl.l.hosts[g][static_cast<size_t>(j)];
      deps[ndeps++] = b.local(reduceAction(pack + g * block, at(a.sendbuf, static_cast<size_t>(owner) * N, E), nullptr,
                                           N, red.spec(true, false)));
    }
    const int32_t packed = b.join(first, static_cast<int32_t>(b.size()));
    if (j == pl.i) {
      srcs[static_cast<size_t>(j)] = pack;
      continue;
    }
    const int peer = pl.mates[static_cast<size_t>(j)];
    b.send(peer, pack, H * block, Deps{packed});
    uint8_t* got = static_cast<uint8_t*>(scratch.get(H * block));
    srcs[static_cast<size_t>(j)] = got;
    deps[ndeps++] = b.recv(peer, got, H * block);
  }
  uint8_t* acc = static_cast<uint8_t*>(scratch.get(H * block));
  Args sum = a;
  if (a.op == RedOp::PreMulSum) sum.op = RedOp::Sum;
  // Every pack is in the dependencies: in place, the result overwrites this rank's input block.
  int32_t reduced = b.localAll(reduceAction(acc, nullptr, nullptr, H * N, Reducer{sum, pl.L}.spec(false, false)), deps, ndeps,
                                srcs, static_cast<size_t>(pl.L));
  Args sub = innerArgs(a, t.nranks);
  sub.sendbuf = acc;
  buildOnTeam(algorithm(p.inner), sub, pl.team, static_cast<size_t>(pl.H), pl.h, p, scratch, b, reduced);
}

// What the phase between hosts is: its call, and the topology it runs on (one rank of each
// host, the L teams sharing each host's cores and link).
Args teamCall(const Args& a, const JobShape& t) {
  Args s = innerArgs(a, t.nranks);
  const int L = t.layout ? static_cast<int>(t.layout->hosts[0].size()) : 1;
  if (a.kind != Kind::AllGather && a.kind != Kind::ReduceScatter) s.count = (a.count + static_cast<size_t>(L) - 1) / static_cast<size_t>(L);
  if (s.kind == Kind::Broadcast || s.kind == Kind::Reduce) s.root = 0;
  return s;
}

JobShape teamTopo(const JobShape& t) {
  JobShape s;
  s.rank = 0;
  s.nranks = t.hosts;
  s.hosts = t.hosts;
  s.ranksPerHost = t.ranksPerHost;
  s.coresPerHost = t.coresPerHost;
  s.ranksPerMachine = t.ranksPerMachine;
  s.slowest = t.slowest;
  return s;
}

// The team's job as hier's phase between hosts runs it: the host's L teams cross its link at
// once. (An AllReduce's, Broadcast's or Reduce's teams carry a slice each and are priced as if
// they had the link alone: shared, the model puts hier behind the ring at 32-256 KiB across 4
// hosts of 2 ranks, where it measured 1.5x ahead, so its within-host phases are overpriced by
// about as much; fitted together, the two stand.)
JobShape innerTopo(const Args& a, const JobShape& t) {
  JobShape s = teamTopo(t);
  if (t.layout && (a.kind == Kind::AllGather || a.kind == Kind::ReduceScatter))
    s.slowest.gbps /= static_cast<double>(t.layout->hosts[0].size());
  return s;
}

// Within a host, `messages` messages of `bytes` each, all at once, from this rank (and as many
// to it): one wait, the bytes over the host's link and through memory.
double localUs(double messages, double bytes, const JobShape& t, const Costs& c) {
  if (messages <= 0) return 0;
  return waitUs(t.local, t, c) + messages * (bytesUs(bytes, t.local.gbps, t) + bytesUs(4 * bytes, c.memoryGBps, t));
}

class Hier final : public Algorithm {
 public:
  Algo id() const override { return Algo::Hier; }
  bool implements(Kind k) const override {
    return k == Kind::AllReduce || k == Kind::Broadcast || k == Kind::Reduce || k == Kind::AllGather ||
           k == Kind::ReduceScatter;
  }
  const char* unfit(const Args& a, const JobShape& t, bool) const override {
    if (!t.layout || t.layout->hosts.size() < 2) return "every rank is on one host";
    if (!t.layout->uniform()) return "its hosts have different numbers of ranks";
    if (static_cast<int>(t.layout->hosts[0].size()) > kernels::kMaxSources)
      return "it reduces the inputs of a host's ranks at once, 16 per host at most";
    const Algorithm* inner = innerFor(a, t, Costs(), nullptr);
    return inner ? nullptr : "no algorithm runs its phase between hosts";
  }
  double predictUs(const Args& a, const JobShape& t, const Costs& c) const override {
    double inner = 0;
    innerFor(a, t, c, &inner);
    const double L = static_cast<double>(t.layout->hosts[0].size()), H = static_cast<double>(t.layout->hosts.size());
    const double total = static_cast<double>(a.count * dataTypeSize(a.dtype)) *
                         (a.kind == Kind::AllGather || a.kind == Kind::ReduceScatter ? H : 1);
    const double slice = total / L;
    double local = 0;
    switch (a.kind) {
      case Kind::AllReduce: local = 2 * localUs(L - 1, slice, t, c) + bytesUs(L * slice, c.memoryGBps, t); break;
      case Kind::Broadcast: local = 2 * localUs(L - 1, slice, t, c); break;
      case Kind::Reduce: local = 2 * localUs(L - 1, slice, t, c) + bytesUs(L * slice, c.memoryGBps, t); break;
      case Kind::AllGather: local = localUs(L - 1, total, t, c) + bytesUs(2 * L * total, c.memoryGBps, t); break;
      default: local = localUs(L - 1, total, t, c) + bytesUs(2 * L * total, c.memoryGBps, t); break;
    }
    // Pieces overlap: the slower side, plus one piece of the faster.
    double pieces = 1;
    if (a.kind == Kind::AllReduce || a.kind == Kind::Broadcast || a.kind == Kind::Reduce)
      pieces = std::max(1.0, std::ceil(total / (kPieceChunks * L * 512.0 * 1024)));
    local *= c.factor("hier", a.kind);
    return c.base("hier", a.kind) + std::max(local, inner) + std::min(local, inner) / pieces;
  }
  void refine(const Args& a, const JobShape& t, const Costs& c, Plan& p) const override {
    if (const Algorithm* inner = innerFor(a, t, c, nullptr)) p.inner = inner->id();
  }
  void build(const Args& a, const JobShape& t, const Plan& p, core::Scratch& s, ProgramBuilder& b) const override {
    switch (a.kind) {
      case Kind::AllReduce:
        if (t.hostStage) {
          const Place pl(*t.layout, t.rank, s);
          stageHierAllReduce(a, t, p, algorithm(p.inner), pl.team, static_cast<size_t>(pl.H), pl.h, s, b);
        } else {
          byPieces(a, t, p, s, b, hierAllReducePiece);
        }
        break;
      case Kind::Broadcast: byPieces(a, t, p, s, b, hierBroadcastPiece); break;
      case Kind::Reduce: byPieces(a, t, p, s, b, hierReducePiece); break;
      case Kind::AllGather: hierAllGather(a, t, p, s, b); break;
      case Kind::ReduceScatter: hierReduceScatter(a, t, p, s, b); break;
      default: fail(Errc::Internal, "hier: %s", kindName(a.kind));
    }
  }

 private:
  // The fastest algorithm for the phase between hosts (its prediction in *us).
  const Algorithm* innerFor(const Args& a, const JobShape& t, const Costs& c, double* us) const {
    if (!t.layout) return nullptr;
    const Args sub = teamCall(a, t);
    const JobShape st = innerTopo(a, t);
    const Algorithm* best = nullptr;
    double bestUs = 0;
    for (const Algorithm* algo : algorithms()) {
      if (algo == this || algo->id() == Algo::P2P || !algo->implements(a.kind) || algo->unfit(sub, st, false)) continue;
      const double u = algo->predictUs(sub, st, c);
      if (!best || u < bestUs) best = algo, bestUs = u;
    }
    if (us) *us = bestUs;
    return best;
  }
};

}  // namespace

const Algorithm& algorithmHier() {
  static const Hier a;
  return a;
}

}  // namespace hora::coll
