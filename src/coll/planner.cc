#include "coll/planner.h"

#include <cctype>

#include "base/error.h"

namespace hora::coll {

namespace {

const std::pair<const char*, Kind> kPlanned[] = {
    {"allreduce", Kind::AllReduce}, {"broadcast", Kind::Broadcast},         {"reduce", Kind::Reduce},
    {"allgather", Kind::AllGather}, {"reducescatter", Kind::ReduceScatter}, {"alltoall", Kind::AllToAll},
    {"barrier", Kind::Barrier},     {"gather", Kind::Gather},               {"scatter", Kind::Scatter},
};

std::string trim(const std::string& s) {
  const size_t a = s.find_first_not_of(" \t"), b = s.find_last_not_of(" \t");
  return a == std::string::npos ? "" : s.substr(a, b - a + 1);
}

std::string sizeText(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB"};
  int u = 0;
  while (bytes >= 1024 && u < 3) bytes /= 1024, ++u;
  return format(bytes == static_cast<double>(static_cast<long long>(bytes)) ? "%.0f %s" : "%.1f %s", bytes, units[u]);
}

}  // namespace

std::array<int, kKinds> parseForced(const std::string& value) {
  std::array<int, kKinds> forced;
  forced.fill(-1);
  std::string v;
  for (char ch : value) v += static_cast<char>(tolower(static_cast<unsigned char>(ch)));
  v = trim(v);
  if (v == "auto") return forced;
  std::string kinds;
  for (const auto& [name, k] : kPlanned) kinds += (kinds.empty() ? "" : ", ") + std::string(name);
  // The names HORA_ALGO takes: those of algorithms of a planned collective (not p2p, which
  // carries send and receive and is never planned).
  std::string forcible;
  for (const Algorithm* a : algorithms())
    if (a->id() != Algo::P2P) forcible += (forcible.empty() ? "" : ", ") + std::string(a->name());
  size_t start = 0;
  bool any = false;
  while (start <= v.size()) {
    size_t end = v.find(',', start);
    if (end == std::string::npos) end = v.size();
    const std::string item = trim(v.substr(start, end - start));
    start = end + 1;
    if (item.empty()) continue;
    any = true;
    const size_t colon = item.find(':');
    const std::string algoName = trim(colon == std::string::npos ? item : item.substr(colon + 1));
    const Algorithm* algo = findAlgorithm(algoName);
    if (!algo || algo->id() == Algo::P2P)
      fail(Errc::InvalidArgument, "HORA_ALGO='%s': '%s' is not an algorithm (expected auto, one of %s, or "
           "collective:algorithm pairs)", value.c_str(), algoName.c_str(), forcible.c_str());
    if (colon == std::string::npos) {
      for (const auto& [name, k] : kPlanned)
        if (algo->implements(k)) forced[static_cast<size_t>(k)] = static_cast<int>(algo->id());
      continue;
    }
    const std::string kindName = trim(item.substr(0, colon));
    const Kind* kind = nullptr;
    for (const auto& p : kPlanned)
      if (kindName == p.first) kind = &p.second;
    if (!kind)
      fail(Errc::InvalidArgument, "HORA_ALGO='%s': '%s' is not a collective (expected one of %s)", value.c_str(),
           kindName.c_str(), kinds.c_str());
    if (!algo->implements(*kind))
      fail(Errc::InvalidArgument, "HORA_ALGO='%s': %s does not implement %s (it has %s)", value.c_str(), algo->name(),
           kindName.c_str(), algorithmNames(kind).c_str());
    forced[static_cast<size_t>(*kind)] = static_cast<int>(algo->id());
  }
  if (!any) fail(Errc::InvalidArgument, "HORA_ALGO='%s' names no algorithm", value.c_str());
  return forced;
}

Plan plan(const Args& call, const JobShape& t, const PlannerSettings& s, bool alone, Choice* why) {
  // Every rank must make the same plan, from what every rank knows of the call. Whether a
  // Broadcast is in place is the root's own (its readers pass their result alone), and the
  // Broadcast's predictions depend on it (the root's copy of its input; the single copy halves
  // its copy with the root in place): every Broadcast is planned as the root's call in place.
  Args a = call;
  if (a.kind == Kind::Broadcast) a.sendbuf = a.recvbuf;
  Plan p;
  p.chunkBytes = s.chunkBytes;
  p.slots = 4;
  // One rank, or nothing to move: every algorithm is a local copy (or nothing but the check of
  // the call, coll/build.cc), forced or not.
  const bool anyWill = t.nranks == 1 || (a.count == 0 && a.kind != Kind::Barrier);
  const int forced = anyWill ? -1 : s.forced[static_cast<size_t>(a.kind)];
  const Algorithm* best = nullptr;
  double bestUs = 0;
  std::vector<std::pair<Algo, double>> others;
  for (const Algorithm* algo : algorithms()) {
    if (!algo->implements(a.kind) || algo->unfit(a, t, alone)) continue;
    const double us = algo->predictUs(a, t, s.costs);
    if (forced < 0 ? (!best || us < bestUs) : static_cast<int>(algo->id()) == forced) {
      if (best) others.emplace_back(best->id(), bestUs);
      best = algo;
      bestUs = us;
    } else {
      others.emplace_back(algo->id(), us);
    }
  }
  if (forced >= 0 && (!best || static_cast<int>(best->id()) != forced)) {
    const Algorithm& f = algorithm(static_cast<Algo>(forced));
    std::string could;
    for (const auto& [id, us] : others) could += (could.empty() ? "" : ", ") + std::string(algoName(id));
    if (best) could += (could.empty() ? "" : ", ") + std::string(best->name());
    fail(Errc::InvalidUsage, "HORA_ALGO forces %s for %s, which cannot run %s here: %s (what could: %s)", f.name(),
         kindName(a.kind), describe(a).c_str(), f.unfit(a, t, alone) ? f.unfit(a, t, alone) : "?",
         could.empty() ? "nothing" : could.c_str());
  }
  if (!best) fail(Errc::Internal, "no algorithm can run %s", describe(a).c_str());
  p.algo = best->id();
  best->refine(a, t, s.costs, p);
  if (why) {
    why->forced = forced >= 0;
    why->predictedUs = bestUs;
    why->others = std::move(others);
  }
  return p;
}

std::string explain(const Args& a, const JobShape& t, const Plan& p, const Choice& c) {
  std::string s = format("%s %s %s, %d rank%s on %d host%s: %s %s (predicted %.1f us", kindName(a.kind),
                         sizeText(static_cast<double>(a.count * dataTypeSize(a.dtype))).c_str(), dataTypeName(a.dtype),
                         t.nranks, t.nranks == 1 ? "" : "s", t.hosts, t.hosts == 1 ? "" : "s",
                         c.forced ? "HORA_ALGO forces" : "chose", algoName(p.algo), c.predictedUs);
  if (p.algo == Algo::Hier) s += format(", %s between hosts", algoName(p.inner));
  for (size_t i = 0; i < c.others.size(); ++i)
    s += format("%s%s %.1f us", i == 0 ? "; " : ", ", algoName(c.others[i].first), c.others[i].second);
  return s + ")";
}

}  // namespace hora::coll
