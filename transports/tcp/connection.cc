#include "transports/tcp/connection.h"

#include <linux/sockios.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "base/error.h"
#include "base/log.h"
#include "base/wait.h"

namespace hora::tcp {

namespace {
constexpr int kMaxIov = 64;

// Whether the peer's end has acknowledged everything written to fd (nothing left in its send
// queue), waiting for that until `until` at most.
bool allAcknowledged(int fd, Clock::time_point until) {
  for (;;) {
    int unsent = 0;
    if (::ioctl(fd, SIOCOUTQ, &unsent) != 0) return false;
    if (unsent == 0) return true;
    if (Clock::now() >= until) return false;
    ::poll(nullptr, 0, 1);
  }
}

}  // namespace

Connection::Connection(std::vector<Fd> sockets, std::string peerName)
    : socks_(sockets.size()), peer_(std::move(peerName)) {
  for (size_t i = 0; i < sockets.size(); ++i) socks_[i].fd = std::move(sockets[i]);
}

// A link closed while the peer may still send to it (a call check it held back, sent after this
// rank's last call: comm/call_check.h) is reset by this end's kernel when that comes, and a
// reset throws away what this end had not yet delivered. So the write side ends first and the
// peer's end is given a moment to acknowledge everything written (its kernel does, whatever its
// process does); then what has come is read and the sockets close.
Connection::~Connection() {
  if (closed_) return;
  const Clock::time_point until = Clock::now() + milliseconds(kCloseAckMs);
  for (Socket& s : socks_) {
    if (!s.fd.valid()) continue;
    ::shutdown(s.fd.get(), SHUT_WR);
    (void)allAcknowledged(s.fd.get(), until);
    char sink[4096];
    for (int i = 0; i < 16 && ::recv(s.fd.get(), sink, sizeof sink, MSG_DONTWAIT) > 0; ++i) {
    }
  }
}

void Connection::pushSend(const void* data, size_t bytes, uint64_t tag, transport::Cookie cookie, bool held) {
  Socket& s = socks_[sendSeq_ % socks_.size()];
  SendOp op;
  op.data = static_cast<const uint8_t*>(data);
  op.bytes = bytes;
  op.sent = 0;
  op.cookie = cookie;
  op.held = held;
  if (held) memcpy(op.copy, data, bytes);
  FrameHeader h;
  h.type = FrameType::Data;
  h.seq = sendSeq_++;
  h.length = bytes;
  h.tag = tag;
  h.call = call_;
  encodeFrameHeader(h, op.header);
  s.sends.push(op);
}

void Connection::postSend(const void* data, size_t bytes, uint64_t tag, transport::Cookie cookie) {
  pushSend(data, bytes, tag, cookie, false);
  ++outstanding_;
  if (held_) release_ = true;  // the held go out ahead of it, in the same write where they share its socket
}

void Connection::postHeld(const void* data, size_t bytes, uint64_t tag, transport::Cookie cookie) {
  if (bytes > kHeldBytes && cookie != transport::kNoCookie) {
    postSend(data, bytes, tag, cookie);
    return;
  }
  if (cookie != transport::kNoCookie) early_.push_back(cookie);
  if (heldDropped_ || closed_ || bytes > kHeldBytes) return;  // a closed link fails at its next progress()
  pushSend(data, bytes, tag, cookie, true);
  if (++held_ >= kHeldMost) release_ = true;
}

bool Connection::releaseHeld() {
  if (!held_ || release_) return false;
  release_ = true;
  return true;
}

void Connection::postRecv(void* data, size_t bytes, uint64_t tag, transport::Cookie cookie) {
  Socket& s = socks_[recvSeq_ % socks_.size()];
  s.recvs.push(RecvOp{static_cast<uint8_t*>(data), bytes, 0, recvSeq_++, tag, cookie, call_});
  s.dataWaiting = false;
  s.peekedAvail = 0;
  ++outstanding_;
}

bool Connection::busy() const { return outstanding_ > 0 || !early_.empty() || (release_ && held_ > 0); }

void Connection::failWire(const std::string& why) {
  fail(Errc::Remote, "%s: %s", peer_.c_str(), why.c_str());
}

ssize_t Connection::peekStream(Socket& s, uint8_t* out, size_t n) {
  const size_t k = std::min(n, s.headerGot);
  memcpy(out, s.buffered(), k);
  if (k == n) return static_cast<ssize_t>(k);
  const ssize_t got = ::recv(s.fd.get(), out + k, n - k, MSG_PEEK | MSG_DONTWAIT);
  if (got > 0) return static_cast<ssize_t>(k) + got;
  return k ? static_cast<ssize_t>(k) : got;
}

size_t Connection::takeBuffered(Socket& s, void* out, size_t n) {
  const size_t k = std::min(n, s.headerGot);
  memcpy(out, s.buffered(), k);
  s.headerGot -= k;
  s.headerAt = s.headerGot ? s.headerAt + k : 0;
  return k;
}

bool Connection::consumeStream(Socket& s, uint8_t* out, size_t n) {
  const size_t k = takeBuffered(s, out, n);
  return k == n || ::recv(s.fd.get(), out + k, n - k, MSG_DONTWAIT) == static_cast<ssize_t>(n - k);
}

bool Connection::progressSends(Socket& s, std::vector<transport::Cookie>& completed) {
  bool moved = false;
  while (sendable(s)) {
    iovec iov[kMaxIov];
    int n = 0;
    bool onlyHeld = true;
    for (size_t i = 0; i < s.sends.size() && n + 2 <= kMaxIov; ++i) {
      SendOp& op = s.sends.at(i);
      if (op.held && !release_) break;  // behind it only what was posted later, held too
      onlyHeld &= op.held;
      size_t off = op.sent;
      if (op.held) {  // its payload's copy follows its header: one piece
        iov[n++] = iovec{op.header + off, kFrameHeaderBytes + op.bytes - off};
        continue;
      }
      if (off < kFrameHeaderBytes) {
        iov[n++] = iovec{op.header + off, kFrameHeaderBytes - off};
        off = kFrameHeaderBytes;
      }
      size_t payloadOff = off - kFrameHeaderBytes;
      if (payloadOff < op.bytes)
        iov[n++] = iovec{const_cast<uint8_t*>(op.payload()) + payloadOff, op.bytes - payloadOff};
    }
    size_t wrote = 0;
    try {
      wrote = writevSome(s.fd.get(), iov, n, peer_.c_str());
    } catch (const Error&) {
      if (!onlyHeld) {
        throw;  // (progress() looks for the peer's own account)
      }
      // Only held messages (call checks): the peer closed its end, or is gone; nobody waits for
      // them there. What it sent before it closed stays for the receives (salvageAbort would
      // skip it): its last frames, or its abort frame, which they read in order.
      while (!s.sends.empty() && s.sends.front().held) {
        s.sends.pop();
        if (--held_ == 0) release_ = false;
      }
      heldDropped_ = true;
      return true;
    }
    if (wrote == 0) {
      // Stuck: the peer does not read. If it failed, it said why on its side of this socket
      // (looked at on every 32nd stuck pass: a syscall).
      if (s.recvs.empty() && (s.stuck++ & 31) == 0) checkForAbort(s);
      break;
    }
    s.stuck = 0;
    moved = true;
    while (wrote > 0) {
      SendOp& op = s.sends.front();
      size_t left = kFrameHeaderBytes + op.bytes - op.sent;
      if (wrote < left) {
        op.sent += wrote;
        wrote = 0;
        break;
      }
      wrote -= left;
      if (op.held) {
        if (--held_ == 0) release_ = false;  // completed when posted
      } else {
        completed.push_back(op.cookie);
        --outstanding_;
      }
      s.sends.pop();
    }
  }
  return moved;
}

bool Connection::readAbort(Socket& s) {
  char buf[kMaxAbortText];
  size_t want = s.abortWant - s.abortText.size();
  size_t n = 0;
  if (want && s.headerGot) n = takeBuffered(s, buf, want);  // what came in with the frame's header
  else if (want) n = readSome(s.fd.get(), buf, want, peer_.c_str());
  s.abortText += peerText(buf, n);
  if (s.abortText.size() < s.abortWant) return n > 0;
  throw PeerFailure(s.abortText, peerCode(s.abortCode));
}

void Connection::checkForAbort(Socket& s) {
  if (s.readingAbort) {
    readAbort(s);
    return;
  }
  uint8_t h[kFrameHeaderBytes];
  const ssize_t n = peekStream(s, h, sizeof h);
  if (n == 0)
    fail(Errc::Remote, "connection closed by %s (it exited, crashed or closed its communicator) while this rank "
         "was sending to it", peer_.c_str());
  if (n < static_cast<ssize_t>(kFrameHeaderBytes)) return;  // nothing, or a header on its way
  if (peekFrameHeader(h).type != FrameType::Abort) {
    // A data frame for a later receive (which checks it). The peer's abort frame may follow
    // it: look behind the frame when it is all there and not large, and again only when more
    // has come.
    s.dataWaiting = true;
    int avail = 0;
    const FrameHeader fh = peekFrameHeader(h);
    const size_t behind = kFrameHeaderBytes + static_cast<size_t>(std::min<uint64_t>(fh.length, kMaxPeekBehind));
    if (fh.length > kMaxPeekBehind || ::ioctl(s.fd.get(), FIONREAD, &avail) != 0) return;
    const size_t waiting = static_cast<size_t>(avail) + s.headerGot;
    if (waiting < behind + kFrameHeaderBytes || waiting == s.peekedAvail) return;
    s.peekedAvail = waiting;
    std::vector<uint8_t> buf(std::min(waiting, behind + kFrameHeaderBytes + kMaxAbortText));
    const ssize_t got = peekStream(s, buf.data(), buf.size());
    if (got < static_cast<ssize_t>(behind + kFrameHeaderBytes)) return;
    const uint8_t* next = buf.data() + behind;
    if (peekFrameHeader(next).type != FrameType::Abort) return;
    const FrameHeader ah = peekFrameHeader(next);
    if (ah.length > kMaxAbortText || static_cast<size_t>(got) < behind + kFrameHeaderBytes + ah.length) return;
    // The connection is over: what the abort says is the cause.
    throw PeerFailure(peerText(reinterpret_cast<const char*>(next) + kFrameHeaderBytes, static_cast<size_t>(ah.length)),
                      peerCode(ah.tag));
  }
  FrameHeader fh;
  std::string why;
  if (decodeFrameHeader(h, Expectation{0, 0, 0}, &fh, &why) != FrameCheck::Abort) failWire(why);
  if (!consumeStream(s, h, sizeof h)) return;
  s.readingAbort = true;
  s.abortWant = fh.length;
  s.abortCode = fh.tag;
  s.abortText.clear();
  readAbort(s);
}

bool Connection::pendingFrame(uint16_t* call, uint64_t* tag) {
  if (closed_) return false;
  Socket& s = socks_[recvSeq_ % socks_.size()];  // the next frame comes on this socket
  if (!s.recvs.empty() || s.headerOk) return false;
  if (s.readingAbort) {
    readAbort(s);
    return false;
  }
  uint8_t h[kFrameHeaderBytes];
  const ssize_t n = peekStream(s, h, sizeof h);
  if (n < static_cast<ssize_t>(kFrameHeaderBytes)) return false;  // nothing whole yet; a close shows elsewhere
  if (peekFrameHeader(h).type == FrameType::Abort) {
    checkForAbort(s);
    return false;
  }
  const FrameHeader fh = peekFrameHeader(h);
  *call = fh.call;
  *tag = fh.tag;
  return true;
}

size_t Connection::takePendingFrames(size_t most, AcceptFrame accept, void* ctx) {
  if (closed_ || most == 0 || socks_.size() > kMaxSockets) return 0;
  for (const Socket& s : socks_)
    if (!s.recvs.empty() || s.headerOk || s.readingAbort) return 0;
  // Frame k of the peer's sequence comes on socket k % nsocks: each socket's waiting bytes are
  // peeked at once (when its first frame is wanted), the frames walked in sequence order, and
  // those taken read in one recv() a socket.
  const size_t n = socks_.size();
  peek_.resize(n * kPeekBytes);
  // No more than the frames wanted can fill: a call's data waiting behind them is not copied.
  const size_t peekBytes = std::min(kPeekBytes, ((most + n - 1) / n) * (kFrameHeaderBytes + kSmallFrameMost));
  size_t have[kMaxSockets] = {}, used[kMaxSockets] = {};
  bool peeked[kMaxSockets] = {};
  size_t took = 0;
  while (took < most) {
    const size_t k = (recvSeq_ + took) % n;
    uint8_t* buf = peek_.data() + k * kPeekBytes;
    if (!peeked[k]) {
      peeked[k] = true;
      const ssize_t got = peekStream(socks_[k], buf, peekBytes);
      have[k] = got > 0 ? static_cast<size_t>(got) : 0;
    }
    if (have[k] - used[k] < kFrameHeaderBytes) break;
    const uint8_t* h = buf + used[k];
    const FrameHeader seen = peekFrameHeader(h);
    if (seen.type == FrameType::Abort) break;
    FrameHeader fh;
    std::string why;
    if (decodeFrameHeader(h, Expectation{recvSeq_ + took, seen.length, seen.tag}, &fh, &why) != FrameCheck::Ok ||
        fh.length > kSmallFrameMost)
      break;  // not a small data frame of this sequence: left for a receive to judge
    const size_t whole = kFrameHeaderBytes + static_cast<size_t>(fh.length);
    if (have[k] - used[k] < whole || !accept(ctx, took, fh.call, fh.tag)) break;
    used[k] += whole;
    ++took;
  }
  for (size_t k = 0; k < n; ++k) {
    if (!used[k]) continue;
    Socket& s = socks_[k];
    if (!consumeStream(s, peek_.data() + k * kPeekBytes, used[k])) failWire("frames shrank while read");
    s.dataWaiting = false;  // the frame checkForAbort found waiting is gone: the socket is read again
    s.peekedAvail = 0;
  }
  recvSeq_ += took;
  return took;
}

void Connection::salvageAbort(Socket& s) {
  try {
    if (s.headerOk || !s.recvs.empty()) {
      // A receive is inside a frame, or frames were read ahead: the abort frame, if the peer
      // sent one, is behind them (a failing peer finishes the frame it had begun first). What
      // has come goes to the receives as it would have (their call fails now anyway).
      std::vector<transport::Cookie> unused;
      while (progressRecvs(s, unused)) {
      }
      if (!s.readingAbort && s.headerOk) return;  // the rest has not come: no boundary
    }
    for (int frames = 0; frames < 64; ++frames) {
      if (s.readingAbort) {
        readAbort(s);
        return;
      }
      uint8_t h[kFrameHeaderBytes];
      if (peekStream(s, h, sizeof h) != static_cast<ssize_t>(kFrameHeaderBytes)) return;
      if (peekFrameHeader(h).type == FrameType::Abort) {
        checkForAbort(s);
        return;
      }
      // A data frame no receive will take now: skip it, if it is all there.
      const FrameHeader fh = peekFrameHeader(h);
      if (fh.length > (uint64_t(64) << 20)) return;
      size_t skip = kFrameHeaderBytes + static_cast<size_t>(fh.length);
      uint8_t sink[65536];
      while (skip > 0) {
        const ssize_t got = s.headerGot ? static_cast<ssize_t>(takeBuffered(s, sink, std::min(skip, sizeof sink)))
                                        : ::recv(s.fd.get(), sink, std::min(skip, sizeof sink), MSG_DONTWAIT);
        if (got <= 0) return;
        skip -= static_cast<size_t>(got);
      }
    }
  } catch (const PeerFailure&) {
    throw;
  } catch (const Error&) {
    // Nothing readable there: the send's own error stands.
  }
}

bool Connection::progressRecvs(Socket& s, std::vector<transport::Cookie>& completed) {
  bool moved = false;
  while (!s.recvs.empty()) {
    RecvOp& r = s.recvs.front();
    if (s.readingAbort) return readAbort(s) || moved;
    if (!s.headerOk) {
      // A small frame comes in with its header in one recv(), and so does whatever has come
      // behind it, as far as the buffer holds it: the frames of the next receives (a batch of
      // call checks, comm/call_check.h; the next calls of a Reduce's leaf that runs ahead of
      // its parent) wait there for them, and a frame partly there is completed from the socket.
      const bool small = r.bytes <= kSmallPayload;
      const size_t need = kFrameHeaderBytes + (small ? r.bytes : 0);
      // An abort frame read ahead is the peer's last: nothing more comes (its text may be short).
      const bool abortHere =
          s.headerGot >= kFrameHeaderBytes && peekFrameHeader(s.buffered()).type == FrameType::Abort;
      if (s.headerGot < need && !abortHere) {
        // The part of a frame left behind the frames taken moves to the start: the read then
        // has the whole buffer (a frame and its header fit it), and the move, less than a
        // frame, is paid once a read.
        if (s.headerAt) {
          if (s.headerGot) memmove(s.header, s.buffered(), s.headerGot);
          s.headerAt = 0;
        }
        size_t want = small ? sizeof s.header : need;
        size_t n = readSome(s.fd.get(), s.header + s.headerGot, want - s.headerGot, peer_.c_str());
        if (n == 0) return moved;
        moved = true;
        s.headerGot += n;
      }
      if (s.headerGot < kFrameHeaderBytes) return moved;
      FrameHeader h;
      std::string why;
      switch (decodeFrameHeader(s.buffered(), Expectation{r.seq, r.bytes, r.tag, r.call}, &h, &why)) {
        case FrameCheck::Bad: failWire(why);
        case FrameCheck::Mismatch: fail(Errc::InvalidUsage, "%s: %s", peer_.c_str(), why.c_str());
        case FrameCheck::Abort: {
          // The reason may have come in with the header already.
          size_t extra = s.headerGot - kFrameHeaderBytes;
          s.readingAbort = true;
          s.abortWant = h.length;
          s.abortCode = h.tag;
          s.abortText = peerText(reinterpret_cast<const char*>(s.buffered()) + kFrameHeaderBytes,
                                  std::min<size_t>(extra, h.length));
          s.headerGot = 0;
          s.headerAt = 0;
          return readAbort(s) || moved;
        }
        case FrameCheck::Ok: s.headerOk = true; break;
      }
      // Payload bytes that came with the header; the rest goes straight to the caller's buffer.
      // What came after this frame (the next receives' frames) stays where it is, next.
      const size_t early = std::min(s.headerGot - kFrameHeaderBytes, r.bytes);
      if (early) memcpy(r.data, s.buffered() + kFrameHeaderBytes, early);
      r.got = early;
      const size_t rest = s.headerGot - kFrameHeaderBytes - early;
      s.headerAt = rest ? s.headerAt + kFrameHeaderBytes + early : 0;
      s.headerGot = rest;
    }
    if (r.got < r.bytes) {
      size_t n = readSome(s.fd.get(), r.data + r.got, r.bytes - r.got, peer_.c_str());
      if (n == 0) return moved;
      moved = true;
      r.got += n;
      if (r.got < r.bytes) return moved;
    }
    completed.push_back(r.cookie);
    --outstanding_;
    s.headerOk = false;
    s.recvs.pop();
    moved = true;
  }
  return moved;
}

bool Connection::progress(std::vector<transport::Cookie>& completed) {
  if (closed_) fail(Errc::Remote, "connection to %s is closed: %s", peer_.c_str(), closedReason_.c_str());
  bool moved = false;
  if (!early_.empty()) {
    completed.insert(completed.end(), early_.begin(), early_.end());
    early_.clear();
    moved = true;
  }
  for (Socket& s : socks_) {
    try {
      if (sendable(s)) moved |= progressSends(s, completed);
      if (!s.recvs.empty()) moved |= progressRecvs(s, completed);
    } catch (const PeerFailure&) {
      throw;
    } catch (const Error& e) {
      // The peer is gone or closed: its own account, if it sent one before it went, is behind
      // what came on this socket, or on another (one where its send had stopped inside a
      // frame too large to finish has none).
      if (e.code() != Errc::Remote) throw;
      salvageAbort(s);
      for (Socket& other : socks_)
        if (&other != &s && other.fd.valid()) salvageAbort(other);
      throw;
    }
  }
  return moved;
}

void Connection::addPollFds(std::vector<pollfd>& fds) const {
  if (closed_) return;
  for (const Socket& s : socks_) {
    short ev = 0;
    const bool sending = sendable(s);  // a held send waits for its release, not for room
    if (sending) ev |= POLLOUT;
    // Input on a socket that only sends may be the peer's abort frame (checkForAbort).
    if (!s.recvs.empty() || (sending && !s.dataWaiting)) ev |= POLLIN;
    if (ev) fds.push_back(pollfd{s.fd.get(), ev, 0});
  }
}

namespace {
// Writes all of [p, p+n) to the socket through the one wait (base/wait.h), for as long as
// `until` leaves (one try when nothing is left); false if it could not (the peer does not
// read, or is gone).
bool writeUntil(int fd, const uint8_t* p, size_t n, Clock::time_point until, const std::string& peer) {
  const auto left = std::max(milliseconds(0), std::chrono::duration_cast<milliseconds>(until - Clock::now()));
  Waiter w(left, nullptr, [] { return std::string("room on the socket"); });
  try {
    writeAll(fd, p, n, w, peer.c_str());
    return true;
  } catch (const Error&) {
    return false;
  }
}

// A message partly out is completed only if this much or less is left of it.
constexpr size_t kMaxFinish = size_t(16) << 20;
}  // namespace

void Connection::finishPartial(Clock::time_point until) noexcept {
  if (closed_) return;
  flushUntil_ = until;  // shutdown() may wait as long for room for its abort frame
  for (Socket& s : socks_) {
    if (s.sends.empty() || !s.fd.valid()) continue;
    SendOp& op = s.sends.front();
    if (op.sent == 0 || op.sent >= kFrameHeaderBytes + op.bytes) continue;
    if (kFrameHeaderBytes + op.bytes - op.sent > kMaxFinish) continue;
    bool ok = true;
    if (op.sent < kFrameHeaderBytes) {
      ok = writeUntil(s.fd.get(), op.header + op.sent, kFrameHeaderBytes - op.sent, until, peer_);
      if (ok) op.sent = kFrameHeaderBytes;
    }
    const size_t off = op.sent - kFrameHeaderBytes;
    if (ok && writeUntil(s.fd.get(), op.payload() + off, op.bytes - off, until, peer_)) {
      if (op.held) --held_;  // whole: an abort frame may follow it
      else --outstanding_;
      s.sends.pop();
    }
  }
}

void Connection::shutdown(const std::string& reason, Errc code) noexcept {
  if (closed_) return;
  closed_ = true;
  closedReason_ = reason;
  std::string text = reason.substr(0, kMaxAbortText);
  // Inside a failing call (finishPartial came first) the abort frame may wait for room until the
  // caller's deadline; otherwise (horaCommAbort) shutdown never waits.
  const Clock::time_point until = flushUntil_;
  for (Socket& s : socks_) {
    // An abort frame can only go out at a frame boundary.
    bool atBoundary = s.sends.empty() || s.sends.front().sent == 0;
    if (atBoundary && s.fd.valid()) {
      uint8_t frame[kFrameHeaderBytes + kMaxAbortText];
      FrameHeader h;
      h.type = FrameType::Abort;
      h.length = text.size();
      h.tag = static_cast<uint64_t>(code);  // an abort frame's tag carries the cause's code
      encodeFrameHeader(h, frame);
      memcpy(frame + kFrameHeaderBytes, text.data(), text.size());
      (void)writeUntil(s.fd.get(), frame, kFrameHeaderBytes + text.size(), until, peer_);
    }
    // The write side ends after the abort frame (a FIN, not a reset: what the peer has not read
    // yet stays readable). Then the socket closes, so that a failed communicator holds no links
    // until it is destroyed, once the peer's end has everything this end sent: a close while
    // data waits to go out resets the connection and throws that data away, the frame with it.
    // Inside a failing call that is waited for until the caller's deadline (the peer's kernel
    // acknowledges what fits its buffer whether or not the peer reads); a socket whose data is
    // still out then, or one shut by horaCommAbort (which never waits), stays open, half
    // closed, until the communicator is freed. What the peer sent and nobody will read is
    // dropped before the close, so that it is a FIN too; whatever the peer sends after it is
    // answered with a reset, which leaves what it has received readable, the frame included,
    // and a peer stuck sending here looks for the frame behind its data (checkForAbort).
    if (s.fd.valid()) {
      ::shutdown(s.fd.get(), SHUT_WR);
      if (allAcknowledged(s.fd.get(), until)) {
        char sink[16384];
        for (int i = 0; i < 64 && ::recv(s.fd.get(), sink, sizeof sink, MSG_DONTWAIT) > 0; ++i) {
        }
        s.fd.reset();
      }
    }
    s.sends.clear();
    s.recvs.clear();
  }
  outstanding_ = 0;
  held_ = 0;
  release_ = false;
  early_.clear();
}

}  // namespace hora::tcp
