#include "comm/bootstrap.h"

#include <pthread.h>
#include <sodium.h>

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

namespace hora {

namespace {
constexpr uint32_t kIdMagic = 0x44495248;  // "HRID"
// Gather, Error and Bye go from a rank to the root; Result and Error from the root to ranks (the
// root's Error: the u32 code of the failure, then its text),
// Reject from the root to a process that it turns away (its rank is taken, or its size is not
// the job's) without failing the job.
// Error: a rank failed during init (its own failure, or a peer's it saw); GaveUp: a rank stopped
// waiting for the others (its timeout), the one case the root reports as a timeout when ranks
// are still missing.
enum class FrameType : uint32_t { Gather = 1, Result = 2, Error = 3, Bye = 4, Reject = 5, GaveUp = 6 };

// Who joins: the rank and size it was started with, and its host and pid, so that a process
// turned away can be told which one holds its rank.
struct HelloPayload {
  uint32_t rank, nranks, pid;
  char host[kHandshakePayloadBytes - 12];  // NUL-padded, cut to fit
};
static_assert(sizeof(HelloPayload) == kHandshakePayloadBytes, "the hello fills the handshake's payload");
// A hello with nranks 0 and this rank releases a rendezvous nobody joined (releaseRendezvous).
constexpr uint32_t kReleaseRank = 0xfffffffeu;

// "rank R (host, pid P)", as PeerInfo::name() says it.
std::string rankName(int rank, const std::string& host, int pid) {
  return format("rank %d (%s, pid %d)", rank, host.c_str(), pid);
}

void putU32(std::string& s, uint32_t v) { s.append(reinterpret_cast<const char*>(&v), 4); }

std::string frame(FrameType t, const std::string& payload) {
  std::string s;
  putU32(s, static_cast<uint32_t>(t));
  putU32(s, static_cast<uint32_t>(payload.size()));
  return s + payload;
}

// The root's report of a failure, as a rank throws it: with the failure's code (a rank that
// never joined is a timeout; a rank that failed, a remote error).
RendezvousFailure rootReport(const std::string& payload) {
  uint32_t code = static_cast<uint32_t>(Errc::Remote);
  if (payload.size() >= 4) memcpy(&code, payload.data(), 4);
  const bool known = code == static_cast<uint32_t>(Errc::Timeout) || code == static_cast<uint32_t>(Errc::InvalidUsage) ||
                     code == static_cast<uint32_t>(Errc::InvalidArgument) || code == static_cast<uint32_t>(Errc::System);
  // The root's text, made fit to show (a C caller's text would end at a NUL byte).
  const std::string why = peerText(payload.substr(std::min<size_t>(payload.size(), 4)));
  return RendezvousFailure(known ? static_cast<Errc>(code) : Errc::Remote,
                           "the rendezvous failed: " + (why.empty() ? std::string("(it gave no reason)") : why));
}
}  // namespace

// ---- the unique id ------------------------------------------------------------------------

void UniqueId::encode(uint8_t out[kUniqueIdBytes]) const {
  memset(out, 0, kUniqueIdBytes);
  memcpy(out, &kIdMagic, 4);
  uint16_t v = kProtocolVersion;
  memcpy(out + 4, &v, 2);
  root.pack(out + 8);
  memcpy(out + 8 + SockAddr::kPackedBytes, secret.bytes, kSecretBytes);
}

UniqueId UniqueId::decode(const uint8_t in[kUniqueIdBytes]) {
  uint32_t magic;
  uint16_t version;
  memcpy(&magic, in, 4);
  memcpy(&version, in + 4, 2);
  if (magic != kIdMagic)
    fail(Errc::InvalidArgument, "not a Hora unique id (bad magic); was it made by horaGetUniqueId?");
  if (version != kProtocolVersion)
    fail(Errc::InvalidArgument, "the unique id is of protocol version %u, this library speaks %u",
         version, kProtocolVersion);
  UniqueId id;
  if (!SockAddr::unpack(in + 8, &id.root) || id.root.port() == 0)
    fail(Errc::InvalidArgument, "the unique id holds no valid rendezvous address");
  memcpy(id.secret.bytes, in + 8 + SockAddr::kPackedBytes, kSecretBytes);
  return id;
}

std::string UniqueId::hex() const {
  uint8_t raw[kUniqueIdBytes];
  encode(raw);
  static const char* digits = "0123456789abcdef";
  std::string s;
  for (uint8_t b : raw) {
    s += digits[b >> 4];
    s += digits[b & 15];
  }
  return s;
}

UniqueId UniqueId::fromHex(const std::string& hex) {
  if (hex.size() != 2 * kUniqueIdBytes)
    fail(Errc::InvalidArgument, "this unique id in hex has %zu digits, not %zu", hex.size(), 2 * kUniqueIdBytes);
  uint8_t raw[kUniqueIdBytes];
  for (size_t i = 0; i < kUniqueIdBytes; ++i) {
    auto nib = [&](char c) -> int {
      if (c >= '0' && c <= '9') return c - '0';
      if (c >= 'a' && c <= 'f') return c - 'a' + 10;
      if (c >= 'A' && c <= 'F') return c - 'A' + 10;
      fail(Errc::InvalidArgument, "a unique id in hex holds a non-hex character '%c'", c);
    };
    raw[i] = static_cast<uint8_t>(nib(hex[2 * i]) << 4 | nib(hex[2 * i + 1]));
  }
  return decode(raw);
}

uint64_t UniqueId::commId() const {
  uint8_t h[16];
  crypto_generichash(h, sizeof h, secret.bytes, kSecretBytes, nullptr, 0);
  uint64_t v;
  memcpy(&v, h, 8);
  return v;
}

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

// ---- a rank's side -----------------------------------------------------------------------

BootstrapClient::BootstrapClient(const UniqueId& id, int rank, int nranks, Waiter& w)
    : rank_(rank), nranks_(nranks) {
  installForkHandler();
  fd_ = connectWithRetry(id.root, w);
  uint8_t payload[kHandshakePayloadBytes] = {0};
  HelloPayload h{};
  h.rank = static_cast<uint32_t>(rank);
  h.nranks = static_cast<uint32_t>(nranks);
  h.pid = static_cast<uint32_t>(getpid());
  strncpy(h.host, log::hostName(), sizeof h.host - 1);
  memcpy(payload, &h, sizeof h);
  try {
    clientHandshake(fd_.get(), id.secret, LinkKind::Bootstrap, payload, w, "the rendezvous");
  } catch (const Error& e) {
    fail(e.code(), "joining the rendezvous at %s: %s", id.root.str().c_str(), e.what());
  }
}

BootstrapClient::~BootstrapClient() = default;

SockAddr BootstrapClient::localAddress() const { return hora::localAddress(fd_.get()); }

void BootstrapClient::close() { fd_.reset(); }

void BootstrapClient::finish(Waiter& w) {
  std::string f = frame(FrameType::Bye, std::string());
  writeAll(fd_.get(), f.data(), f.size(), w, "the rendezvous");
  fd_.reset();
}

void BootstrapClient::tellRoot(const std::string& why, bool gaveUp) noexcept {
  std::string f = frame(gaveUp ? FrameType::GaveUp : FrameType::Error, why.substr(0, 1024));
  (void)::send(fd_.get(), f.data(), f.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
}

void BootstrapClient::abandon(const std::string& why) noexcept {
  if (!fd_.valid()) return;
  tellRoot(why);
  fd_.reset();
}

void BootstrapClient::giveUp(const std::string& why, milliseconds most) {
  if (!fd_.valid()) return;
  tellRoot(why, true);
  awaitFailureReport(most);
  fd_.reset();
}

void BootstrapClient::checkForFailure() {
  pollfd p{fd_.get(), POLLIN, 0};
  if (!fd_.valid() || ::poll(&p, 1, 0) <= 0) return;
  // Between rounds the root only ever sends an error; it is small, and already here.
  static const std::atomic<bool> never{false};
  Waiter w(milliseconds(5000), &never, [] { return std::string("the rendezvous's error report"); });
  uint32_t hdr[2];
  readAll(fd_.get(), hdr, sizeof hdr, w, "the rendezvous");
  if (hdr[0] != static_cast<uint32_t>(FrameType::Error) || hdr[1] > kMaxBootstrapFrame)
    fail(Errc::Remote, "the rendezvous sent an unexpected frame (type %u) between rounds", hdr[0]);
  std::string payload(hdr[1], '\0');
  readAll(fd_.get(), payload.data(), payload.size(), w, "the rendezvous");
  throw rootReport(payload);
}

std::vector<std::string> BootstrapClient::allgather(const std::string& mine, Waiter& w) {
  std::string f = frame(FrameType::Gather, mine);
  const char* who = "the rendezvous";
  try {
    writeAll(fd_.get(), f.data(), f.size(), w, who);
    uint32_t hdr[2];
    readAll(fd_.get(), hdr, sizeof hdr, w, who);
    if (hdr[1] > kMaxBootstrapFrame)
      fail(Errc::Remote, "the rendezvous sent a frame of %u bytes (at most %u allowed)", hdr[1], kMaxBootstrapFrame);
    std::string payload(hdr[1], '\0');
    readAll(fd_.get(), payload.data(), payload.size(), w, who);
    if (hdr[0] == static_cast<uint32_t>(FrameType::Error)) throw rootReport(payload);
    if (hdr[0] == static_cast<uint32_t>(FrameType::Reject)) {
      const std::string why = peerText(payload);
      throw Error(Errc::InvalidUsage, why.empty() ? "the rendezvous turned this process away without saying why" : why);
    }
    if (hdr[0] != static_cast<uint32_t>(FrameType::Result))
      fail(Errc::Remote, "the rendezvous sent an unknown frame type %u", hdr[0]);
    std::vector<std::string> out;
    size_t off = 0;
    for (int r = 0; r < nranks_; ++r) {
      uint32_t len;
      if (payload.size() - off < 4) fail(Errc::Remote, "truncated bootstrap result");
      memcpy(&len, payload.data() + off, 4);
      off += 4;
      if (payload.size() - off < len) fail(Errc::Remote, "truncated bootstrap result");
      out.push_back(payload.substr(off, len));
      off += len;
    }
    if (off != payload.size()) fail(Errc::Remote, "bootstrap result has %zu trailing bytes", payload.size() - off);
    return out;
  } catch (const Error& e) {
    if (e.code() == Errc::Remote && strstr(e.what(), "closed by") != nullptr)
      fail(Errc::Remote, "lost the rendezvous (the process that made the unique id exited?): %s", e.what());
    throw;
  }
}

void BootstrapClient::awaitFailureReport(milliseconds most) {
  if (!fd_.valid()) return;
  Waiter w(most, nullptr, [] { return std::string("the rendezvous's error report"); });
  try {
    for (;;) {
      checkForFailure();
      w.idle([&](milliseconds m) {
        pollfd p{fd_.get(), POLLIN, 0};
        pollFor(&p, 1, static_cast<int>(m.count()));
      });
    }
  } catch (const RendezvousFailure&) {
    throw;
  } catch (const Error&) {
    // No report in time, or the link closed without one: the caller keeps its own error.
  }
}

void installForkHandler() {
  static std::once_flag once;
  std::call_once(once, [] { pthread_atfork(nullptr, nullptr, [] { closeTrackedSocketsInChild(); }); });
}

}  // namespace hora
