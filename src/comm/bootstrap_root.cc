// The rendezvous's root: it admits each rank (the handshake, then its hello), gathers what
// every rank sends, answers each with the whole, and reports a failure to every rank it can
// reach, naming the culprit; a rank that never comes is a timeout naming it (comm/bootstrap.h).
#include <pthread.h>

#include <sys/socket.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <thread>

#include <unistd.h>

#include "base/acceptor.h"
#include "base/error.h"
#include "base/log.h"
#include "comm/bootstrap.h"
#include "comm/bootstrap_wire.h"

namespace hora {

using namespace bootstrap_wire;

// ---- the root ----------------------------------------------------------------------------

namespace {

// One rank's link as the root sees it: frames are read and written without blocking.
struct Member {
  Fd fd;
  int rank = -1;
  std::string name;      // "rank R (host, pid P)"
  std::string in;        // bytes of the frame being read
  std::string out;       // bytes to write
  size_t outOff = 0;
  int rounds = 0;        // gather frames received
  std::string blob;      // of the current round
  bool gone = false;
  bool said_bye = false;  // left after completing its init
};

class Root {
 public:
  Root(Fd listener, const Secret& secret, milliseconds timeout, int nranks, std::shared_ptr<RendezvousEnd> end)
      : acceptor_(std::move(listener), secret, LinkKind::Bootstrap,
                  std::min(timeout, milliseconds(30000)), log::kBootstrap),
        timeout_(timeout),
        end_(std::move(end)),
        nranks_(nranks) {}

  const SockAddr& address() const { return acceptor_.address(); }

  void run() {
    static const std::atomic<bool> never{false};
    Waiter w(timeout_, &never, [this] { return describe(); });
    try {
      while (!finished()) {
        bool moved = acceptNew();
        for (Member& m : members_) moved |= service(m);
        moved |= maybeAnswerRound();
        size_t closed = 0;
        moved |= dropClosed(turnedAway_, &closed);  // told why they may not join
        if (moved) {
          w.progressed();
          continue;
        }
        w.idle([&](milliseconds most) {
          std::vector<pollfd> fds;
          acceptor_.addPollFds(fds);
          for (Member& m : members_)
            if (!m.gone) fds.push_back(pollfd{m.fd.get(), static_cast<short>(POLLIN | (m.out.size() > m.outOff ? POLLOUT : 0)), 0});
          for (const Fd& t : turnedAway_) fds.push_back(pollfd{t.get(), POLLIN, 0});
          pollFor(fds.data(), fds.size(), static_cast<int>(most.count()));
        });
      }
    } catch (const Error& e) {
      failAll(e.code(), e.what());
    } catch (const std::exception& e) {
      failAll(Errc::Internal, e.what());
    }
    HORA_INFO(log::kBootstrap, "rendezvous at %s done", address().str().c_str());
  }

  // After a failure: every rank, joined or still to come, is told why, and its link is closed
  // only once it has read that (its end closes first), so that no reset can overtake the news.
  // A round's answer already under way goes out whole first (a rank may need it to find the
  // cause itself). Ends when every rank of the job has been told, or after the timeout without
  // progress; the end is signalled early, once every rank connected has been told and closed.
  void drainFailed(Errc code, const std::string& why) {
    static const std::atomic<bool> never{false};
    std::string report;
    putU32(report, static_cast<uint32_t>(code));
    const std::string f = frame(FrameType::Error, report + why);
    struct Telling {
      Fd fd;
      std::string pending;  // the rest of an answer under way, then the error
    };
    std::vector<Fd> told;         // the error written, write side shut, waiting for the rank's close
    std::vector<Telling> telling;  // accepted or joined, the error not yet written
    size_t done = 0;  // ranks that have left: told, or gone before the failure
    for (Member& m : members_) {
      if (m.gone) ++done;
      else telling.push_back(Telling{std::move(m.fd), m.out.substr(m.outOff) + f});
    }
    members_.clear();
    Waiter w(std::min(timeout_, milliseconds(60000)), &never, [] { return std::string("ranks to hear of the failure"); });
    try {
      while (nranks_ < 0 || static_cast<int>(done) < nranks_) {
        bool moved = false;
        fresh_.clear();
        moved |= acceptor_.advance(fresh_);
        for (Acceptor::Accepted& a : fresh_) telling.push_back(Telling{std::move(a.fd), f});
        for (size_t i = 0; i < telling.size();) {
          Telling& t = telling[i];
          const ssize_t n = ::send(t.fd.get(), t.pending.data(), t.pending.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
          if (n > 0) {
            t.pending.erase(0, static_cast<size_t>(n));
            moved = true;
          }
          // Written, or a rank that cannot take it (its link broken): shut, and wait for its close.
          const bool broken = n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR;
          if (!t.pending.empty() && !broken) {
            ++i;
            continue;
          }
          ::shutdown(t.fd.get(), SHUT_WR);
          told.push_back(std::move(t.fd));
          telling.erase(telling.begin() + static_cast<long>(i));
          moved = true;
        }
        size_t closed = 0;
        moved |= dropClosed(told, &closed);
        done += closed;
        if (telling.empty() && told.empty() && end_) end_->set();
        if (moved) {
          w.progressed();
          continue;
        }
        w.idle([&](milliseconds most) {
          std::vector<pollfd> fds;
          acceptor_.addPollFds(fds);
          for (const Telling& t : telling) fds.push_back(pollfd{t.fd.get(), POLLOUT, 0});
          for (const Fd& t : told) fds.push_back(pollfd{t.get(), POLLIN, 0});
          pollFor(fds.data(), fds.size(), static_cast<int>(most.count()));
        });
      }
    } catch (const Error&) {
      // Out of time: whoever has not heard by now gets a closed connection.
    }
  }

 private:
  bool finished() const {
    if (released_) return true;
    if (nranks_ < 0 || static_cast<int>(members_.size()) < nranks_) return false;
    for (const Member& m : members_)
      if (!m.gone) return false;
    return true;
  }

  std::string describe() const {
    if (nranks_ < 0) return format("the first rank to join the rendezvous at %s", address().str().c_str());
    std::string missing;
    int count = 0;
    for (int r = 0; r < nranks_; ++r) {
      bool have = false;
      for (const Member& m : members_) have |= m.rank == r;
      if (!have && count++ < 8) missing += format("%s%d", missing.empty() ? "" : ", ", r);
    }
    if (!missing.empty())
      return format("rank%s %s%s to join the rendezvous at %s (%zu of %d joined%s%s)", count > 1 ? "s" : "", missing.c_str(),
                    count > 8 ? ", ..." : "", address().str().c_str(), members_.size(), nranks_,
                    firstTurnedAway_.empty() ? "" : "; turned away: ", firstTurnedAway_.c_str());
    return format("all ranks to reach bootstrap round %d", round_ + 1);
  }

  bool acceptNew() {
    fresh_.clear();
    bool moved = acceptor_.advance(fresh_);
    for (Acceptor::Accepted& a : fresh_) {
      HelloPayload h;
      memcpy(&h, a.payload, sizeof h);
      std::string host(h.host, strnlen(h.host, sizeof h.host));
      for (char& c : host)
        if (c < 0x20 || c > 0x7e) c = '?';
      const std::string name = rankName(static_cast<int>(h.rank), host, static_cast<int>(h.pid));
      // A process that does not fit the job is turned away, and the job goes on: it may be a
      // stray of another job that shares the address and secret. Should it be one of this job,
      // the job's timeout names its missing rank and this process.
      const std::string where = format("the rendezvous at %s", address().str().c_str());
      if (h.nranks == 0 && h.rank == kReleaseRank && members_.empty()) {
        HORA_INFO(log::kBootstrap, "the rendezvous at %s is released by %s: its job formed elsewhere",
                  address().str().c_str(), host.c_str());
        released_ = true;
        continue;
      }
      if (h.nranks < 1 || h.nranks > (1u << 20) || h.rank >= h.nranks) {
        turnAway(std::move(a.fd), format("%s cannot join %s as rank %u of %u ranks", name.c_str(), where.c_str(),
                                         h.rank, h.nranks));
        continue;
      }
      if (nranks_ < 0) nranks_ = static_cast<int>(h.nranks);
      if (static_cast<int>(h.nranks) != nranks_) {
        turnAway(std::move(a.fd),
                 format("%s cannot join %s: it was started as one of %u ranks, but the job there has %d rank%s "
                        "(a different HORA_SIZE, or a second job on the same address and secret?)",
                        name.c_str(), where.c_str(), h.nranks, nranks_, nranks_ == 1 ? "" : "s"));
        continue;
      }
      const Member* holder = nullptr;
      for (const Member& m : members_)
        if (m.rank == static_cast<int>(h.rank)) holder = &m;
      if (holder) {
        turnAway(std::move(a.fd), format("%s cannot join %s: %s has joined it already (a second job on the "
                                         "same address and secret, or two processes given the same rank?)",
                                         name.c_str(), where.c_str(), holder->name.c_str()));
        continue;
      }
      Member m;
      m.fd = std::move(a.fd);
      m.rank = static_cast<int>(h.rank);
      m.name = name;
      members_.push_back(std::move(m));
      HORA_TRACE(log::kBootstrap, "%s joined from %s", name.c_str(), a.peer.str().c_str());
    }
    return moved;
  }

  // Tells a process why it may not join, and keeps its link until it has read that and closed
  // (dropClosed), so that no reset overtakes the news.
  void turnAway(Fd fd, const std::string& why) {
    HORA_WARN(log::kBootstrap, "turned away: %s", why.c_str());
    if (firstTurnedAway_.empty()) firstTurnedAway_ = why;
    const std::string f = frame(FrameType::Reject, why);
    // Small, so one nonblocking send suffices on a fresh link.
    (void)::send(fd.get(), f.data(), f.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
    ::shutdown(fd.get(), SHUT_WR);
    if (turnedAway_.size() < 64) turnedAway_.push_back(std::move(fd));
  }

  // Reads and drops what the links still send; forgets (and counts in `closed`) each link once
  // its end has closed. Returns whether anything moved.
  static bool dropClosed(std::vector<Fd>& links, size_t* closed) {
    bool moved = false;
    for (size_t i = 0; i < links.size();) {
      char sink[4096];
      ssize_t n = ::recv(links[i].get(), sink, sizeof sink, MSG_DONTWAIT);
      if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
        links.erase(links.begin() + static_cast<long>(i));
        ++*closed;
        moved = true;
        continue;
      }
      moved |= n > 0;
      ++i;
    }
    return moved;
  }

  // Reads and writes what the member's socket allows. Returns whether anything moved.
  bool service(Member& m) {
    if (m.gone) return false;
    bool moved = false;
    const std::string& who = m.name;
    while (m.out.size() > m.outOff) {
      size_t n;
      try {
        n = writeSome(m.fd.get(), m.out.data() + m.outOff, m.out.size() - m.outOff, who.c_str());
      } catch (const Error&) {
        return leave(m);
      }
      if (n == 0) break;
      m.outOff += n;
      moved = true;
    }
    if (m.outOff == m.out.size()) {
      m.out.clear();
      m.outOff = 0;
    }
    for (;;) {
      char buf[65536];
      size_t want = sizeof buf;
      if (m.in.size() >= 8) {
        uint32_t type, len;
        memcpy(&type, m.in.data(), 4);
        memcpy(&len, m.in.data() + 4, 4);
        const bool failure = type == static_cast<uint32_t>(FrameType::Error) ||
                             type == static_cast<uint32_t>(FrameType::GaveUp);
        const bool known = type == static_cast<uint32_t>(FrameType::Gather) || failure ||
                           type == static_cast<uint32_t>(FrameType::Bye);
        if (!known || len > kMaxBootstrapFrame)
          fail(Errc::Remote, "%s sent a malformed bootstrap frame (type %u, %u bytes)", m.name.c_str(), type, len);
        if (m.in.size() == 8 + static_cast<size_t>(len) && failure) {
          std::string why = m.in.substr(8, std::min<size_t>(len, 1024));
          for (char& ch : why)
            if (static_cast<unsigned char>(ch) < 0x20 || static_cast<unsigned char>(ch) >= 0x7f) ch = '?';
          // A rank that gave up waiting, while ranks are missing, gave up on them: a timeout. Any
          // other failure of a rank is a peer's failure to the others, whoever is missing.
          const bool missing = nranks_ > 0 && static_cast<int>(members_.size()) < nranks_;
          const bool timedOut = missing && type == static_cast<uint32_t>(FrameType::GaveUp);
          fail(timedOut ? Errc::Timeout : Errc::Remote, "%s failed during init: %s%s%s", m.name.c_str(), why.c_str(),
               missing ? "; the root was still waiting for " : "", missing ? describe().c_str() : "");
        }
        if (m.in.size() == 8 + static_cast<size_t>(len) && type == static_cast<uint32_t>(FrameType::Bye)) {
          m.said_bye = true;
          m.in.clear();
          moved = true;
          continue;
        }
        if (m.in.size() == 8 + static_cast<size_t>(len)) {
          if (m.rounds > round_)
            fail(Errc::Remote, "%s sent two bootstrap rounds at once", m.name.c_str());
          m.blob = m.in.substr(8);
          m.in.clear();
          ++m.rounds;
          moved = true;
          continue;
        }
        want = std::min(want, 8 + static_cast<size_t>(len) - m.in.size());
      } else {
        want = 8 - m.in.size();
      }
      size_t n;
      try {
        n = readSome(m.fd.get(), buf, want, who.c_str());
      } catch (const Error&) {
        return leave(m);
      }
      if (n == 0) break;
      m.in.append(buf, n);
      moved = true;
    }
    return moved;
  }

  // A member closed its link: fine after its goodbye (its init is complete), an error
  // otherwise, which every other rank hears of at once.
  bool leave(Member& m) {
    m.gone = true;
    m.fd.reset();
    if (!m.said_bye)
      fail(Errc::Remote, "%s left the rendezvous before its init completed (it exited or failed)", m.name.c_str());
    return true;
  }

  bool maybeAnswerRound() {
    if (nranks_ < 0 || static_cast<int>(members_.size()) < nranks_) return false;
    for (const Member& m : members_)
      if (m.rounds <= round_) return false;
    std::vector<const Member*> byRank(static_cast<size_t>(nranks_));
    for (const Member& m : members_) byRank[static_cast<size_t>(m.rank)] = &m;
    std::string payload;
    for (const Member* m : byRank) {
      putU32(payload, static_cast<uint32_t>(m->blob.size()));
      payload += m->blob;
    }
    if (payload.size() > kMaxBootstrapFrame)
      fail(Errc::InvalidUsage, "bootstrap round of %zu bytes exceeds %u", payload.size(), kMaxBootstrapFrame);
    std::string f = frame(FrameType::Result, payload);
    for (Member& m : members_) m.out += f;
    ++round_;
    return true;
  }

  void failAll(Errc code, const std::string& why) {
    HORA_WARN(log::kBootstrap, "rendezvous at %s failed: %s", address().str().c_str(), why.c_str());
    drainFailed(code, why);
  }

  Acceptor acceptor_;
  milliseconds timeout_;
  std::shared_ptr<RendezvousEnd> end_;
  std::vector<Member> members_;
  std::vector<Acceptor::Accepted> fresh_;
  std::vector<Fd> turnedAway_;    // told why, waiting for them to close
  std::string firstTurnedAway_;   // why, for the timeout's text
  int nranks_;
  bool released_ = false;  // by releaseRendezvous: ends without waiting for anyone
  int round_ = 0;
};

}  // namespace

void RendezvousEnd::set() {
  std::lock_guard<std::mutex> lock(mu_);
  done_ = true;
  cv_.notify_all();
}

void RendezvousEnd::finish() {
  std::lock_guard<std::mutex> lock(mu_);
  done_ = finished_ = true;
  cv_.notify_all();
}

bool RendezvousEnd::awaitFinished(milliseconds most) {
  std::unique_lock<std::mutex> lock(mu_);
  return cv_.wait_for(lock, most, [this] { return finished_; });
}

bool RendezvousEnd::await(milliseconds most) {
  std::unique_lock<std::mutex> lock(mu_);
  return cv_.wait_for(lock, most, [this] { return done_; });
}

UniqueId startRendezvous(const SockAddr& bindAddr, const Secret& secret, milliseconds timeout,
                         std::shared_ptr<RendezvousEnd> end, int nranks) {
  return startRendezvous(listenSocket(bindAddr), secret, timeout, std::move(end), nranks);
}

void releaseRendezvous(const UniqueId& id) noexcept {
  try {
    static const std::atomic<bool> never{false};
    Waiter w(milliseconds(5000), &never, [&] { return format("releasing the rendezvous at %s", id.root.str().c_str()); });
    Fd fd = connectWithRetry(id.root, w);
    uint8_t payload[kHandshakePayloadBytes] = {0};
    HelloPayload h{};
    h.rank = kReleaseRank;
    h.nranks = 0;
    h.pid = static_cast<uint32_t>(getpid());
    strncpy(h.host, log::hostName(), sizeof h.host - 1);
    memcpy(payload, &h, sizeof h);
    clientHandshake(fd.get(), id.secret, LinkKind::Bootstrap, payload, w, "the rendezvous");
  } catch (const std::exception& e) {
    HORA_INFO(log::kBootstrap, "the rendezvous at %s could not be released: %s", id.root.str().c_str(), e.what());
  }
}

UniqueId startRendezvous(Fd listener, const Secret& secret, milliseconds timeout, std::shared_ptr<RendezvousEnd> end,
                         int nranks) {
  installForkHandler();
  auto root = std::make_shared<Root>(std::move(listener), secret, timeout, nranks, end);
  UniqueId id;
  id.root = root->address();
  id.secret = secret;
  std::thread([root, end]() mutable {
    root->run();
    root.reset();  // freed before the end is told: a process may exit (or check for leaks) then
    if (end) end->finish();
  }).detach();
  HORA_INFO(log::kBootstrap, "rendezvous listening at %s", id.root.str().c_str());
  return id;
}

}  // namespace hora
