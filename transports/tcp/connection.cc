#include "transports/tcp/connection.h"

#include <sys/socket.h>

#include <cstring>

#include "base/error.h"
#include "base/log.h"

namespace hora::tcp {

namespace {
constexpr int kMaxIov = 64;

}  // namespace

Connection::Connection(std::vector<Fd> sockets, std::string peerName)
    : socks_(sockets.size()), peer_(std::move(peerName)) {
  for (size_t i = 0; i < sockets.size(); ++i) socks_[i].fd = std::move(sockets[i]);
}

Connection::~Connection() = default;

void Connection::postSend(const void* data, size_t bytes, uint64_t tag, transport::Cookie cookie) {
  Socket& s = socks_[sendSeq_ % socks_.size()];
  SendOp op;
  op.data = static_cast<const uint8_t*>(data);
  op.bytes = bytes;
  op.sent = 0;
  op.cookie = cookie;
  FrameHeader h;
  h.type = FrameType::Data;
  h.seq = sendSeq_++;
  h.length = bytes;
  h.tag = tag;
  encodeFrameHeader(h, op.header);
  s.sends.push(op);
  ++outstanding_;
}

void Connection::postRecv(void* data, size_t bytes, uint64_t tag, transport::Cookie cookie) {
  Socket& s = socks_[recvSeq_ % socks_.size()];
  s.recvs.push(RecvOp{static_cast<uint8_t*>(data), bytes, 0, recvSeq_++, tag, cookie});
  ++outstanding_;
}

bool Connection::busy() const { return outstanding_ > 0; }

void Connection::failWire(const std::string& why) {
  fail(Errc::Remote, "%s: %s", peer_.c_str(), why.c_str());
}

bool Connection::progressSends(Socket& s, std::vector<transport::Cookie>& completed) {
  bool moved = false;
  while (!s.sends.empty()) {
    iovec iov[kMaxIov];
    int n = 0;
    for (size_t i = 0; i < s.sends.size() && n + 2 <= kMaxIov; ++i) {
      SendOp& op = s.sends.at(i);
      size_t off = op.sent;
      if (off < kFrameHeaderBytes) {
        iov[n++] = iovec{op.header + off, kFrameHeaderBytes - off};
        off = kFrameHeaderBytes;
      }
      size_t payloadOff = off - kFrameHeaderBytes;
      if (payloadOff < op.bytes)
        iov[n++] = iovec{const_cast<uint8_t*>(op.data) + payloadOff, op.bytes - payloadOff};
    }
    size_t wrote = writevSome(s.fd.get(), iov, n, peer_.c_str());
    if (wrote == 0) break;
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
      completed.push_back(op.cookie);
      --outstanding_;
      s.sends.pop();
    }
  }
  return moved;
}

bool Connection::readAbort(Socket& s) {
  char buf[kMaxAbortText];
  size_t want = s.abortWant - s.abortText.size();
  size_t n = want ? readSome(s.fd.get(), buf, want, peer_.c_str()) : 0;
  s.abortText += peerText(buf, n);
  if (s.abortText.size() < s.abortWant) return n > 0;
  throw PeerFailure(s.abortText, peerCode(s.abortCode));
}

bool Connection::progressRecvs(Socket& s, std::vector<transport::Cookie>& completed) {
  bool moved = false;
  while (!s.recvs.empty()) {
    RecvOp& r = s.recvs.front();
    if (s.readingAbort) return readAbort(s) || moved;
    if (!s.headerOk) {
      // A small frame comes in with its header in one recv(); never more than the frame the
      // head receive expects, so nothing of a later frame is read ahead.
      const bool small = r.bytes <= kSmallPayload;
      const size_t want = kFrameHeaderBytes + (small ? r.bytes : 0);
      size_t n = readSome(s.fd.get(), s.header + s.headerGot, want - s.headerGot, peer_.c_str());
      if (n == 0) return moved;
      moved = true;
      s.headerGot += n;
      if (s.headerGot < kFrameHeaderBytes) return moved;
      FrameHeader h;
      std::string why;
      switch (decodeFrameHeader(s.header, Expectation{r.seq, r.bytes, r.tag}, &h, &why)) {
        case FrameCheck::Bad: failWire(why);
        case FrameCheck::Mismatch: fail(Errc::InvalidUsage, "%s: %s", peer_.c_str(), why.c_str());
        case FrameCheck::Abort: {
          // The reason may have come in with the header already.
          size_t extra = s.headerGot - kFrameHeaderBytes;
          s.readingAbort = true;
          s.abortWant = h.length;
          s.abortCode = h.tag;
          s.abortText = peerText(reinterpret_cast<const char*>(s.header) + kFrameHeaderBytes,
                                  std::min<size_t>(extra, h.length));
          s.headerGot = 0;
          return readAbort(s) || moved;
        }
        case FrameCheck::Ok: s.headerOk = true; break;
      }
      // Payload bytes that came with the header; the rest goes straight to the caller's buffer.
      const size_t early = s.headerGot - kFrameHeaderBytes;
      if (early) memcpy(r.data, s.header + kFrameHeaderBytes, early);
      r.got = early;
      s.headerGot = 0;
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
  for (Socket& s : socks_) {
    if (!s.sends.empty()) moved |= progressSends(s, completed);
    if (!s.recvs.empty()) moved |= progressRecvs(s, completed);
  }
  return moved;
}

void Connection::addPollFds(std::vector<pollfd>& fds) const {
  if (closed_) return;
  for (const Socket& s : socks_) {
    short ev = 0;
    if (!s.sends.empty()) ev |= POLLOUT;
    if (!s.recvs.empty()) ev |= POLLIN;
    if (ev) fds.push_back(pollfd{s.fd.get(), ev, 0});
  }
}

void Connection::shutdown(const std::string& reason, Errc code) noexcept {
  if (closed_) return;
  closed_ = true;
  closedReason_ = reason;
  std::string text = reason.substr(0, kMaxAbortText);
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
      (void)::send(s.fd.get(), frame, kFrameHeaderBytes + text.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
    }
    s.fd.reset();
    s.sends.clear();
    s.recvs.clear();
  }
  outstanding_ = 0;
}

}  // namespace hora::tcp
