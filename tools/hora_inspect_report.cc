// hora-inspect's reading of the dumps and its report (hora_inspect.h).
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cinttypes>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>
#include <set>
#include <sstream>

#include "hora_inspect.h"

namespace hora::inspect {

namespace {

std::string fmt(const char* f, ...) __attribute__((format(printf, 1, 2)));
std::string fmt(const char* f, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, f);
  vsnprintf(buf, sizeof buf, f, ap);
  va_end(ap);
  return buf;
}

bool readFile(const std::string& path, std::string* out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::ostringstream s;
  s << in.rdbuf();
  *out = s.str();
  return true;
}

bool endsWith(const std::string& s, const char* tail) {
  const size_t n = strlen(tail);
  return s.size() >= n && s.compare(s.size() - n, n, tail) == 0;
}

std::vector<std::string> dumpsIn(const std::string& dir) {
  std::vector<std::string> files;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) {
      const std::string name = e->d_name;
      if (name.rfind("hora-dump.", 0) == 0 && endsWith(name, ".json")) files.push_back(dir + "/" + name);
    }
    closedir(d);
  }
  std::sort(files.begin(), files.end());
  return files;
}

Call callOf(const Json& e) {
  Call c;
  c.seq = static_cast<uint64_t>(e.get("seq") ? e.get("seq")->integer() : 0);
  if (const Json* v = e.get("call")) c.call = static_cast<uint64_t>(v->integer());
  if (const Json* v = e.get("collective")) c.collective = v->str();
  if (const Json* v = e.get("dtype")) c.dtype = v->str();
  if (const Json* v = e.get("op")) c.op = v->str();
  if (const Json* v = e.get("algorithm")) c.algorithm = v->str();
  if (const Json* v = e.get("state")) c.state = v->str();
  if (const Json* v = e.get("count")) c.count = static_cast<uint64_t>(v->integer());
  if (const Json* v = e.get("root")) c.root = static_cast<int>(v->integer(-1));
  if (const Json* v = e.get("peer")) c.peer = static_cast<int>(v->integer(-1));
  if (const Json* v = e.get("started")) c.started = v->integer();
  if (const Json* v = e.get("ended")) c.ended = v->integer();
  if (const Json* w = e.get("wait"); w && w->type == Json::Object) {
    c.waiting = true;
    if (const Json* v = w->get("on")) c.waitOn = v->str();
    if (const Json* v = w->get("rank")) c.waitRank = static_cast<int>(v->integer(-1));
    if (const Json* v = w->get("step")) c.step = static_cast<uint32_t>(v->integer());
    if (const Json* v = w->get("steps")) c.steps = static_cast<uint32_t>(v->integer());
    if (const Json* v = w->get("since")) c.waitSince = v->integer();
  }
  return c;
}

void readDump(const std::string& file, const Json& doc, std::vector<Communicator>& comms,
              std::vector<std::string>* problems) {
  const std::string host = doc.get("host") ? doc.get("host")->str() : "";
  const int pid = doc.get("pid") ? static_cast<int>(doc.get("pid")->integer()) : 0;
  const Json* list = doc.get("communicators");
  if (!list || list->type != Json::Array) {
    problems->push_back(file + ": no communicators");
    return;
  }
  for (const Json& c : list->items) {
    RankDump r;
    r.file = file;
    r.host = host;
    r.pid = pid;
    r.processStart = doc.get("processStart") ? static_cast<uint64_t>(doc.get("processStart")->integer()) : 0;
    r.time = doc.get("time") ? doc.get("time")->integer() : 0;
    r.rank = c.get("rank") ? static_cast<int>(c.get("rank")->integer(-1)) : -1;
    r.state = c.get("state") ? c.get("state")->str() : "";
    const std::string id = c.get("commId") ? c.get("commId")->str() : "";
    const int nranks = c.get("nranks") ? static_cast<int>(c.get("nranks")->integer()) : 0;
    if (const Json* e = c.get("error"); e && e->type == Json::Object) {
      r.errorCode = e->get("code") ? static_cast<int>(e->get("code")->integer()) : 0;
      r.errorText = e->get("text") ? e->get("text")->str() : "";
    }
    if (id.empty() || id == "0000000000000000") {
      problems->push_back(fmt("%s: rank %d of %d of a communicator that is still initialising", file.c_str(), r.rank, nranks));
      continue;
    }
    if (const Json* es = c.get("entries"); es && es->type == Json::Array)
      for (const Json& e : es->items) r.calls.push_back(callOf(e));
    auto it = std::find_if(comms.begin(), comms.end(), [&](const Communicator& x) { return x.commId == id; });
    if (it == comms.end()) {
      comms.emplace_back();
      it = comms.end() - 1;
      it->commId = id;
      it->nranks = nranks;
      it->name = c.get("name") ? c.get("name")->str() : "";
    }
    if (const Json* ps = c.get("peers"); ps && ps->type == Json::Array)
      for (const Json& p : ps->items) {
        const int rank = p.get("rank") ? static_cast<int>(p.get("rank")->integer(-1)) : -1;
        if (rank >= 0) it->peers[rank] = Peer{p.get("host") ? p.get("host")->str() : "", p.get("pid") ? static_cast<int>(p.get("pid")->integer()) : 0};
      }
    // Two dumps of one rank (horaCommDump to another file, say): the later one.
    auto old = it->ranks.find(r.rank);
    if (old == it->ranks.end() || old->second.time < r.time) it->ranks[r.rank] = std::move(r);
  }
}

std::string localHost() {
  char buf[256] = {0};
  if (gethostname(buf, sizeof buf - 1) != 0) return "";
  return buf;
}

// "0-2", "0, 2, 5-7".
std::string rankList(std::vector<int> ranks) {
  std::sort(ranks.begin(), ranks.end());
  std::string s;
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (!s.empty()) s += ", ";
    s += j == i ? std::to_string(ranks[i]) : j == i + 1 ? fmt("%d, %d", ranks[i], ranks[j]) : fmt("%d-%d", ranks[i], ranks[j]);
    i = j + 1;
  }
  return s;
}
std::string ranksWord(const std::vector<int>& ranks) { return (ranks.size() == 1 ? "rank " : "ranks ") + rankList(ranks); }

const char* errorName(int code) {
  static const char* const kNames[] = {"horaSuccess",        "horaUnhandledCudaError", "horaSystemError",
                                       "horaInternalError",  "horaInvalidArgument",    "horaInvalidUsage",
                                       "horaRemoteError",    "horaInProgress",         "horaTimeout"};
  return code >= 0 && code <= 8 ? kNames[code] : "an unknown code";
}

std::string clip(const std::string& s, size_t most) { return s.size() <= most ? s : s.substr(0, most) + "..."; }

std::string clock(int64_t us) {
  const time_t secs = static_cast<time_t>(us / 1000000);
  struct tm utc {};
  gmtime_r(&secs, &utc);
  char buf[32];
  strftime(buf, sizeof buf, "%H:%M:%S", &utc);
  return fmt("%s.%03d", buf, static_cast<int>(us / 1000 % 1000));
}

// Where one rank stands in its communicator.
struct Standing {
  int rank = -1;
  const RankDump* dump = nullptr;  // null: no dump
  const Call* current = nullptr;   // the oldest call it is in
  size_t inGroup = 0;              // calls started with it (a group)
  size_t queued = 0;
  uint64_t lastDone = 0;  // the last collective it completed (0: none)
  const Call* lastDoneCall = nullptr;
  const Call* lastFailed = nullptr;
  std::string process;  // "pid 123, state S (sleeping)"
};

std::string processOf(const Communicator& c, int rank, const RankDump* d) {
  std::string host;
  int pid = 0;
  uint64_t start = 0;
  if (d) {
    host = d->host;
    pid = d->pid;
    start = d->processStart;
  } else if (auto p = c.peers.find(rank); p != c.peers.end()) {
    host = p->second.host;
    pid = p->second.pid;
  }
  if (!pid) return "pid unknown";
  return fmt("pid %d, %s", pid, processState(host, pid, start).c_str());
}

Standing standingOf(const Communicator& c, int rank) {
  Standing s;
  s.rank = rank;
  auto it = c.ranks.find(rank);
  s.dump = it == c.ranks.end() ? nullptr : &it->second;
  s.process = processOf(c, rank, s.dump);
  if (!s.dump) return s;
  for (const Call& k : s.dump->calls) {
    if (k.state == "started") {
      if (!s.current) s.current = &k;
      ++s.inGroup;
    } else if (k.state == "queued") {
      ++s.queued;
    } else if (k.state == "done") {
      if (k.call) s.lastDone = k.call;
      s.lastDoneCall = &k;
    } else if (k.state == "failed") {
      s.lastFailed = &k;
    }
  }
  return s;
}

std::string waitText(const Call& k, int64_t now, bool plural) {
  const char* verb = plural ? "wait" : "waits";
  std::string s;
  if (k.waitOn == "message from")
    s = fmt("%s at step %u%s for a message from rank %d", verb, k.step, k.steps ? fmt(" of %u", k.steps).c_str() : "",
            k.waitRank);
  else if (k.waitOn == "message to")
    s = fmt("%s at step %u%s for %s message to rank %d to leave", verb, k.step,
            k.steps ? fmt(" of %u", k.steps).c_str() : "", plural ? "their" : "its", k.waitRank);
  else
    s = fmt("%s at step %u for rank %d (shared stage)", verb, k.step, k.waitRank);
  if (k.waitSince && now > k.waitSince) s += fmt(", for %.1f s", static_cast<double>(now - k.waitSince) / 1e6);
  return s;
}

struct CommReport {
  std::vector<std::string> lines;
  std::vector<Standing> ranks;
  std::vector<std::pair<uint64_t, std::map<std::string, std::vector<int>>>> mismatches;
};

CommReport analyse(const Communicator& c) {
  CommReport r;
  int64_t first = 0, last = 0;
  for (const auto& [rank, d] : c.ranks) {
    if (!first || d.time < first) first = d.time;
    last = std::max(last, d.time);
  }
  std::vector<int> have;
  for (const auto& [rank, d] : c.ranks) have.push_back(rank);
  r.lines.push_back(fmt("communicator %s%s%s: %d ranks; dumps of %s%s", c.commId.c_str(), c.name.empty() ? "" : " ",
                        c.name.empty() ? "" : quote(c.name).c_str(), c.nranks, have.empty() ? "none" : ranksWord(have).c_str(),
                        first ? fmt(", written %s to %s UTC", clock(first).c_str(), clock(last).c_str()).c_str() : ""));
  for (int rank = 0; rank < c.nranks; ++rank) r.ranks.push_back(standingOf(c, rank));

  // Failures first: they are the cause when there is one.
  for (const Standing& s : r.ranks)
    if (s.dump && s.dump->errorCode)
      r.lines.push_back(fmt("  rank %d failed (%s)%s%s: %s", s.rank, errorName(s.dump->errorCode),
                            s.lastFailed ? (" in " + s.lastFailed->what()).c_str() : "",
                            s.lastFailed && s.lastFailed->waiting ? (", where it " + waitText(*s.lastFailed, 0, false)).c_str() : "",
                            clip(s.dump->errorText, 300).c_str()));

  // The calls ranks are in, by call, and within a call by what they wait for.
  std::map<std::pair<uint64_t, uint64_t>, std::vector<const Standing*>> inCall;  // (call, seq if p2p)
  for (const Standing& s : r.ranks)
    if (s.current) inCall[{s.current->call, s.current->call ? 0 : s.current->seq}].push_back(&s);
  for (const auto& [key, who] : inCall) {
    const Call& k = *who.front()->current;
    const std::string detail = k.detail() + (k.algorithm.empty() ? "" : "; " + k.algorithm);
    const std::string what = k.what() + (detail.empty() ? "" : " (" + detail + ")");
    std::vector<std::pair<std::string, std::vector<int>>> waits;  // by identical wait
    for (const Standing* s : who) {
      const Call& x = *s->current;
      std::string w = x.waiting ? fmt("%s|%d|%u|%u", x.waitOn.c_str(), x.waitRank, x.step, x.steps) : "";
      auto it = std::find_if(waits.begin(), waits.end(), [&](const auto& p) { return p.first == w; });
      if (it == waits.end()) waits.push_back({w, {s->rank}});
      else it->second.push_back(s->rank);
    }
    std::string text;
    for (const auto& [w, ranks] : waits) {
      const Standing* s = who.front();
      for (const Standing* x : who)
        if (x->rank == ranks.front()) s = x;
      const bool plural = ranks.size() > 1;
      text += (text.empty() ? "" : "; ") + ranksWord(ranks) + " " +
              (w.empty() ? std::string(plural ? "are in it, not blocked" : "is in it, not blocked")
                         : waitText(*s->current, s->dump->time, plural));
      if (s->inGroup > 1) text += fmt(" (with %zu more calls of its group)", s->inGroup - 1);
    }
    r.lines.push_back("  " + what + ": " + text);
  }

  // Ranks in no call, and ranks without a dump.
  for (const Standing& s : r.ranks) {
    if (!s.dump) {
      r.lines.push_back(fmt("  rank %d wrote no dump (%s)", s.rank, s.process.c_str()));
      continue;
    }
    if (s.current) continue;
    std::string done = s.lastDone ? fmt("last finished #%" PRIu64, s.lastDone) : std::string("has finished no call");
    if (s.dump->errorCode)
      r.lines.push_back(fmt("  rank %d %s and is in no call since its communicator failed (%s)", s.rank, done.c_str(),
                            s.process.c_str()));
    else
      r.lines.push_back(fmt("  rank %d %s and is in no call (%s)", s.rank, done.c_str(), s.process.c_str()));
  }
  for (const Standing& s : r.ranks)
    if (s.queued) r.lines.push_back(fmt("  rank %d has %zu call(s) queued on streams", s.rank, s.queued));

  // Calls that do not match: one number, different collectives (or counts, types, ops, roots).
  std::map<uint64_t, std::map<std::string, std::vector<int>>> byCall;
  for (const auto& [rank, d] : c.ranks)
    for (const Call& k : d.calls)
      if (k.call) byCall[k.call][k.describe()].push_back(rank);
  for (const auto& [call, kinds] : byCall)
    if (kinds.size() > 1) r.mismatches.push_back({call, kinds});
  for (size_t i = 0; i < r.mismatches.size() && i < 3; ++i) {
    std::string parts;
    for (const auto& [what, ranks] : r.mismatches[i].second)
      parts += (parts.empty() ? "" : ", ") + ranksWord(ranks) + " in " + what;
    r.lines.push_back(fmt("  mismatch at call #%" PRIu64 ": %s", r.mismatches[i].first, parts.c_str()));
  }
  if (r.mismatches.size() > 3) r.lines.push_back(fmt("  and %zu more mismatched calls", r.mismatches.size() - 3));

  // The last call each rank completed.
  std::map<uint64_t, std::vector<int>> byDone;
  for (const Standing& s : r.ranks)
    if (s.dump) byDone[s.lastDone].push_back(s.rank);
  std::string done;
  for (const auto& [call, ranks] : byDone)
    done += (done.empty() ? "" : "; ") + (call ? fmt("#%" PRIu64, call) : std::string("none")) + " on " + ranksWord(ranks);
  if (!done.empty()) r.lines.push_back("  last completed: " + done);
  return r;
}

}  // namespace

std::string Call::what() const {
  if (collective == "Send") return fmt("Send to rank %d", peer);
  if (collective == "Recv") return fmt("Recv from rank %d", peer);
  return fmt("%s #%" PRIu64, collective.c_str(), call);
}

std::string Call::detail() const {
  std::string s = collective == "Barrier" ? "" : fmt("%" PRIu64 " %s", count, dtype.c_str());
  if (!op.empty()) s += ", " + op;
  if (root >= 0) s += fmt(", root %d", root);
  return s;
}

std::string Call::describe() const {
  const std::string d = detail();
  return d.empty() ? collective : collective + " of " + d;
}

std::vector<Communicator> load(const std::vector<std::string>& paths, std::vector<std::string>* problems) {
  std::vector<std::string> files;
  for (const std::string& p : paths) {
    struct stat st {};
    if (stat(p.c_str(), &st) != 0) {
      problems->push_back(p + ": " + strerror(errno));
    } else if (S_ISDIR(st.st_mode)) {
      const std::vector<std::string> in = dumpsIn(p);
      if (in.empty()) problems->push_back(p + ": no hora-dump.*.json files");
      files.insert(files.end(), in.begin(), in.end());
    } else {
      files.push_back(p);
    }
  }
  std::vector<Communicator> comms;
  for (const std::string& f : files) {
    std::string text, why;
    Json doc;
    if (!readFile(f, &text)) {
      problems->push_back(f + ": " + strerror(errno));
    } else if (!parseJson(text, &doc, &why)) {
      problems->push_back(f + ": not JSON: " + why);
    } else if (!doc.get("format") || doc.get("format")->str() != "hora-dump") {
      problems->push_back(f + ": not a Hora dump");
    } else {
      readDump(f, doc, comms, problems);
    }
  }
  // The largest communicators first (the job's), then by id.
  std::sort(comms.begin(), comms.end(), [](const Communicator& a, const Communicator& b) {
    return a.nranks != b.nranks ? a.nranks > b.nranks : a.commId < b.commId;
  });
  return comms;
}

std::string processState(const std::string& host, int pid, uint64_t processStart) {
  static const std::string here = localHost();
  if (!host.empty() && host != here) return "on host " + host + ", not visible from here";
  std::string line;
  if (!readFile("/proc/" + std::to_string(pid) + "/stat", &line) || line.empty()) return "gone";
  const size_t close = line.rfind(')');
  if (close == std::string::npos || close + 2 >= line.size()) return "state unknown";
  const char state = line[close + 2];
  // Field 22, the start time, counted from field 3 (the state) after the ')'.
  const char* p = line.c_str() + close;  // the end of field 2
  for (int field = 2; p && field < 22; ++field) p = strchr(p + 1, ' ');
  const unsigned long long start = p ? strtoull(p + 1, nullptr, 10) : 0;
  if (processStart && start && start != processStart) return "gone (its pid is another process's now)";
  const char* what = "";
  switch (state) {
    case 'R': what = "running"; break;
    case 'S': what = "sleeping"; break;
    case 'D': what = "in uninterruptible sleep"; break;
    case 'T': what = "stopped"; break;
    case 't': what = "stopped by a debugger"; break;
    case 'Z': return "exited (a zombie its parent has not reaped)";
    case 'X': return "gone";
    case 'I': what = "idle"; break;
    default: what = "?"; break;
  }
  return fmt("state %c (%s)", state, what);
}

std::string reportText(const std::vector<Communicator>& comms, const std::vector<std::string>& problems) {
  std::string out;
  for (const Communicator& c : comms) {
    for (const std::string& l : analyse(c).lines) out += l + "\n";
  }
  if (comms.empty()) out += "no communicator in the dumps\n";
  for (const std::string& p : problems) out += "note: " + p + "\n";
  return out;
}

std::string reportJson(const std::vector<Communicator>& comms, const std::vector<std::string>& problems) {
  std::string out = "{\"communicators\": [";
  for (size_t ci = 0; ci < comms.size(); ++ci) {
    const Communicator& c = comms[ci];
    const CommReport r = analyse(c);
    out += fmt("%s\n {\"commId\": %s, \"name\": %s, \"nranks\": %d, \"ranks\": [", ci ? "," : "", quote(c.commId).c_str(),
               quote(c.name).c_str(), c.nranks);
    for (size_t i = 0; i < r.ranks.size(); ++i) {
      const Standing& s = r.ranks[i];
      out += fmt("%s\n  {\"rank\": %d, \"dump\": %s, \"process\": %s", i ? "," : "", s.rank,
                 s.dump ? quote(s.dump->file).c_str() : "null", quote(s.process).c_str());
      if (s.dump) {
        out += fmt(", \"state\": %s, \"error\": %s, \"lastDone\": %s, \"queued\": %zu", quote(s.dump->state).c_str(),
                   s.dump->errorCode ? quote(s.dump->errorText).c_str() : "null",
                   s.lastDone ? std::to_string(s.lastDone).c_str() : "null", s.queued);
        if (s.current) {
          const Call& k = *s.current;
          out += fmt(", \"current\": {\"seq\": %" PRIu64 ", \"call\": %s, \"what\": %s, \"collective\": %s", k.seq,
                     k.call ? std::to_string(k.call).c_str() : "null", quote(k.describe()).c_str(), quote(k.collective).c_str());
          if (k.waiting)
            out += fmt(", \"wait\": {\"on\": %s, \"rank\": %d, \"step\": %u, \"steps\": %s, \"seconds\": %.3f}",
                       quote(k.waitOn).c_str(), k.waitRank, k.step, k.steps ? std::to_string(k.steps).c_str() : "null",
                       k.waitSince && s.dump->time > k.waitSince ? static_cast<double>(s.dump->time - k.waitSince) / 1e6 : 0.0);
          out += "}";
        } else {
          out += ", \"current\": null";
        }
      }
      out += "}";
    }
    out += "],\n \"mismatches\": [";
    for (size_t i = 0; i < r.mismatches.size(); ++i) {
      out += fmt("%s{\"call\": %" PRIu64 ", \"calls\": {", i ? ", " : "", r.mismatches[i].first);
      bool first = true;
      for (const auto& [what, ranks] : r.mismatches[i].second) {
        std::string list;
        for (int x : ranks) list += (list.empty() ? "" : ", ") + std::to_string(x);
        out += (first ? "" : ", ") + quote(what) + ": [" + list + "]";
        first = false;
      }
      out += "}}";
    }
    out += "],\n \"report\": [";
    for (size_t i = 0; i < r.lines.size(); ++i) out += (i ? ", " : "") + quote(r.lines[i]);
    out += "]}";
  }
  out += "],\n\"problems\": [";
  for (size_t i = 0; i < problems.size(); ++i) out += (i ? ", " : "") + quote(problems[i]);
  return out + "]}\n";
}

}  // namespace hora::inspect
