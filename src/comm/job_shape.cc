// The job as the planner sees it (coll::JobShape): init's last step, from what every rank told
// the others (comm.h's CommIdentity) and the links chosen to each.
#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "comm/comm.h"
#include "comm/config.h"

namespace hora {

void describeJob(const CommIdentity& self, const transport::SharedStage* stage, uint64_t* stageSeq, const Config& cfg,
                 const coll::Costs& costs, bool spins, coll::JobShape& shape, coll::HostLayout& layout) {
  const int rank = self.rank, nranks = self.nranks;
  shape.spins = spins;
  const std::vector<topo::HostEntry> hostList = jobHosts(self.peers);
  // The job's shape, for the planner's predictions: hosts, the busiest host's ranks, and
  // the slowest link any pair uses (the one with the highest latency in the cost model).
  shape.rank = rank;
  shape.callCheck = cfg.callCheck;
  shape.nranks = nranks;
  if (stage && stage->size() == nranks) {  // the stage algorithms may run
    shape.stage = stage;
    shape.stageSeq = stageSeq;
  }
  shape.hosts = static_cast<int>(hostList.size());
  shape.ranksPerHost = 0;
  for (const topo::HostEntry& h : hostList)
    if (static_cast<int>(h.ranks.size()) > shape.ranksPerHost) {
      shape.ranksPerHost = static_cast<int>(h.ranks.size());
      shape.coresPerHost = std::max(1, h.host.pus);
    }
  std::map<std::string, int> perMachine;
  for (const PeerInfo& p : self.peers) shape.ranksPerMachine = std::max(shape.ranksPerMachine, ++perMachine[p.machineId]);
  // Across hosts: where each rank is, the slowest link within a host and between hosts.
  if (hostList.size() > 1) {
    std::vector<int> label(static_cast<size_t>(nranks));
    for (size_t h = 0; h < hostList.size(); ++h)
      for (int r : hostList[h].ranks) label[static_cast<size_t>(r)] = static_cast<int>(h);
    layout = coll::HostLayout::fromLabels(label);
    shape.layout = &layout;
    const std::vector<int>& mates = layout.hosts[static_cast<size_t>(layout.hostOf[static_cast<size_t>(rank)])];
    if (stage && stage->ranks() == mates && cfg.hierStage) {
      shape.hostStage = stage;
      shape.hostStageSeq = stageSeq;
    }
  }
  const int myHost = shape.layout ? layout.hostOf[static_cast<size_t>(rank)] : 0;
  bool haveLocal = false, haveRemote = false;
  for (int r = 0; r < nranks; ++r) {
    if (r == rank) continue;
    const coll::LinkCost& l = costs.link(self.linkNames[static_cast<size_t>(r)]);
    const bool local = !shape.layout || layout.hostOf[static_cast<size_t>(r)] == myHost;
    coll::LinkCost& into = local ? shape.local : shape.slowest;
    bool& have = local ? haveLocal : haveRemote;
    if (!have || l.latencyUs > into.latencyUs) into = l;
    have = true;
  }
  if (!shape.layout) shape.slowest = shape.local;
}

}  // namespace hora
