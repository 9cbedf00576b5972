// An in-memory transport for testing algorithms and the executor without sockets.
//
// A World of n ranks holds one Channel per ordered pair (src, dst): the sends src posted and
// the receives dst posted, not yet matched. Rank r's Connection to peer p (MemConn) sends
// into channel (r, p) and receives from channel (p, r). progress() on either side matches
// the head send with the head receive of a channel (checking equal length and tag, like the
// TCP transport), copies the bytes, and queues each cookie for the connection object that
// posted it: a connection reports only its own cookies.
//
// To expose missing dependencies in the algorithms, the transport is deliberately hostile
// within its contract:
//   - a receive buffer is filled with poison when the receive is posted (the buffer is the
//     transport's until the receive completes), so an algorithm that reads it early, or that
//     still needed what was there, produces wrong results;
//   - a send's bytes are snapshotted when posted and compared when the send is matched: a
//     change in between (the algorithm wrote a buffer that was in flight) is an error;
//   - matches can be deferred at random (seeded, so runs are reproducible), which widens the
//     windows in which those races would show.
//
// Sends are rendezvous by default: a send completes only when a matching receive has taken its
// bytes, which is all the transport contract promises (a TCP send, too, cannot complete once
// the socket buffers are full and the peer is not reading). With `eager` a send completes as
// soon as it is posted (its bytes are copied, as a socket buffer would), which is what a TCP
// link does for messages that fit in its buffers.
//
// Because every rank runs in the same executor and nothing outside the world can move, an
// executor round in which nothing moved means nothing ever will: a deadlock. So the executor's
// no-progress timeout is only ever reached by a deadlock, never by a slow machine.
#pragma once
#include <cstdint>
#include <cstring>
#include <deque>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "base/error.h"
#include "transports/transport.h"

namespace unit {

using hora::transport::Cookie;

struct MemSend {
  const uint8_t* data;
  size_t bytes;
  uint64_t tag;
  Cookie cookie;
  std::vector<uint8_t> snapshot;
  bool eager = false;  // already reported complete; the bytes are in snapshot
};
struct MemRecv {
  uint8_t* data;
  size_t bytes;
  uint64_t tag;
  Cookie cookie;
};

struct MemChannel {
  int src = 0, dst = 0;
  std::deque<MemSend> sends;
  std::deque<MemRecv> recvs;
  std::vector<Cookie> sendDone;  // matched, for the sender's connection to report
  std::vector<Cookie> recvDone;  // matched, for the receiver's connection to report
  uint64_t matched = 0;
};

struct MemWorld;

class MemConn final : public hora::transport::Connection {
 public:
  MemConn(MemWorld* w, MemChannel* out, MemChannel* in, std::string name)
      : world_(w), out_(out), in_(in), name_(std::move(name)) {}

  void postSend(const void* data, size_t bytes, uint64_t tag, Cookie cookie) override;
  void postRecv(void* data, size_t bytes, uint64_t tag, Cookie cookie) override;
  bool progress(std::vector<Cookie>& completed) override;
  bool busy() const override { return outstanding_ > 0; }
  void addPollFds(std::vector<pollfd>&) const override {}
  void shutdown(const std::string&, hora::Errc) noexcept override { closed_ = true; }
  const std::string& peerName() const override { return name_; }
  size_t outstanding() const { return outstanding_; }

 private:
  bool match(MemChannel& c);
  MemWorld* world_;
  MemChannel* out_;
  MemChannel* in_;
  std::string name_;
  size_t outstanding_ = 0;
  bool closed_ = false;
};

struct MemWorld {
  int n;
  std::vector<std::unique_ptr<MemChannel>> channels;  // [src * n + dst]
  std::vector<std::unique_ptr<MemConn>> conns;        // [rank * n + peer], null for self
  std::vector<std::vector<hora::transport::Connection*>> table;  // per rank, by peer
  std::mt19937_64 rng;
  double deferP;
  bool eager = false;
  uint8_t poison = 0xC3;
  uint64_t bytesMoved = 0;

  explicit MemWorld(int nranks, uint64_t seed = 1, double deferProbability = 0.0)
      : n(nranks), rng(seed), deferP(deferProbability) {
    channels.resize(static_cast<size_t>(n * n));
    conns.resize(static_cast<size_t>(n * n));
    table.assign(static_cast<size_t>(n), std::vector<hora::transport::Connection*>(static_cast<size_t>(n), nullptr));
    for (int s = 0; s < n; ++s)
      for (int d = 0; d < n; ++d) {
        auto c = std::make_unique<MemChannel>();
        c->src = s;
        c->dst = d;
        channels[static_cast<size_t>(s * n + d)] = std::move(c);
      }
    for (int r = 0; r < n; ++r)
      for (int p = 0; p < n; ++p) {
        if (r == p) continue;
        auto c = std::make_unique<MemConn>(this, channel(r, p), channel(p, r),
                                           "rank " + std::to_string(p) + " (seen from rank " + std::to_string(r) + ")");
        table[static_cast<size_t>(r)][static_cast<size_t>(p)] = c.get();
        conns[static_cast<size_t>(r * n + p)] = std::move(c);
      }
  }
  MemChannel* channel(int src, int dst) { return channels[static_cast<size_t>(src * n + dst)].get(); }
  MemConn* conn(int r, int p) { return conns[static_cast<size_t>(r * n + p)].get(); }
  bool defer() { return deferP > 0 && std::uniform_real_distribution<double>(0, 1)(rng) < deferP; }

  // Everything posted was matched and reported.
  bool quiet(std::string* why) const {
    for (const auto& c : channels)
      if (!c->sends.empty() || !c->recvs.empty() || !c->sendDone.empty() || !c->recvDone.empty()) {
        *why = "channel " + std::to_string(c->src) + "->" + std::to_string(c->dst) + " has " +
               std::to_string(c->sends.size()) + " unmatched sends, " + std::to_string(c->recvs.size()) +
               " unmatched receives";
        return false;
      }
    for (const auto& c : conns)
      if (c && c->busy()) {
        *why = "a connection is still busy";
        return false;
      }
    return true;
  }
};

inline void MemConn::postSend(const void* data, size_t bytes, uint64_t tag, Cookie cookie) {
  MemSend s;
  s.data = static_cast<const uint8_t*>(data);
  s.bytes = bytes;
  s.tag = tag;
  s.cookie = cookie;
  if (bytes) s.snapshot.assign(s.data, s.data + bytes);
  s.eager = world_->eager;
  if (s.eager) out_->sendDone.push_back(cookie);  // complete at once: the bytes are copied
  out_->sends.push_back(std::move(s));
  ++outstanding_;
}

inline void MemConn::postRecv(void* data, size_t bytes, uint64_t tag, Cookie cookie) {
  if (bytes) memset(data, world_->poison, bytes);
  in_->recvs.push_back(MemRecv{static_cast<uint8_t*>(data), bytes, tag, cookie});
  ++outstanding_;
}

inline bool MemConn::match(MemChannel& c) {
  bool moved = false;
  while (!c.sends.empty() && !c.recvs.empty()) {
    if (world_->defer()) return true;  // a match is possible: not idle
    MemSend& s = c.sends.front();
    MemRecv& r = c.recvs.front();
    if (s.bytes != r.bytes || s.tag != r.tag)
      hora::fail(hora::Errc::Remote,
                 "memory transport %d->%d, message %llu: the sender sent %zu bytes with tag 0x%016llx, "
                 "the receiver expected %zu bytes with tag 0x%016llx",
                 c.src, c.dst, static_cast<unsigned long long>(c.matched), s.bytes,
                 static_cast<unsigned long long>(s.tag), r.bytes, static_cast<unsigned long long>(r.tag));
    if (!s.eager && s.bytes && memcmp(s.snapshot.data(), s.data, s.bytes) != 0)
      hora::fail(hora::Errc::Internal,
                 "memory transport %d->%d, message %llu: the send buffer changed while the send was in flight",
                 c.src, c.dst, static_cast<unsigned long long>(c.matched));
    if (s.bytes) memcpy(r.data, s.eager ? s.snapshot.data() : s.data, s.bytes);
    world_->bytesMoved += s.bytes;
    if (!s.eager) c.sendDone.push_back(s.cookie);
    c.recvDone.push_back(r.cookie);
    c.sends.pop_front();
    c.recvs.pop_front();
    ++c.matched;
    moved = true;
  }
  return moved;
}

inline bool MemConn::progress(std::vector<Cookie>& completed) {
  if (closed_) hora::fail(hora::Errc::Remote, "connection to %s is closed", name_.c_str());
  bool moved = match(*out_);
  moved |= match(*in_);
  // Only this connection's own cookies: its sends on out_, its receives on in_.
  for (Cookie k : out_->sendDone) completed.push_back(k);
  for (Cookie k : in_->recvDone) completed.push_back(k);
  size_t reported = out_->sendDone.size() + in_->recvDone.size();
  outstanding_ -= reported;
  out_->sendDone.clear();
  in_->recvDone.clear();
  return moved || reported > 0;
}

}  // namespace unit
