#include "transports/shm/connection.h"

#include <algorithm>
#include <cstring>

#include "base/error.h"
#include "transports/shm/segment.h"

namespace hora::shm {

using namespace frame;

Connection::Connection(const World& world, uint32_t peerLocal)
    : world_(world), peer_(peerLocal) {
  const Segment& mine = world.own;
  const Segment& theirs = world.peers[peerLocal].segment;
  out_ = mine.ctl(peerLocal);
  outRing_ = mine.ring(peerLocal);
  in_ = theirs.ctl(world.localIndex);
  inRing_ = theirs.ring(world.localIndex);
  ringBytes_ = mine.ringBytes();
}

const std::string& Connection::peerName() const { return world_.peers[peer_].name; }

namespace {
// A message from this size on maps its ring whole, at once (see warm()).
constexpr size_t kWarmBytes = size_t(4) << 10;
}  // namespace

// A ring is allocated as it is first written (segment.cc: a host's n^2 rings are mostly never
// used) and mapped by each side as it first touches it: a page fault per 4 KiB, about a
// microsecond each, 256 per ring of 1 MiB on each side. Messages of a page or more sweep the
// whole ring within a few hundred calls anyway, so the first one maps it all in one call
// instead of faulting its way around it, in the calls a benchmark times (4 ranks on 2 cores:
// a Gather of 64 KiB blocks took 79-83 us a call, the next size 20, now 18-28; a Scatter of
// 16 KiB blocks 52 us, now 17); smaller messages, which may never go round, keep faulting in
// only what they use.
void Connection::warm(const void* ring, bool* done, bool write) {
  *done = true;
  populate(ring, static_cast<size_t>(ringBytes_), write);
}

void Connection::postSend(const void* data, size_t bytes, uint64_t tag, transport::Cookie cookie) {
  if (!outWarm_ && bytes >= kWarmBytes) warm(outRing_, &outWarm_, true);
  SendOp op{static_cast<const uint8_t*>(data), bytes, 0, cookie, {}};
  FrameHeader h;
  h.type = FrameType::Data;
  h.seq = sendSeq_++;
  h.length = bytes;
  h.tag = tag;
  h.call = call_;
  encodeFrameHeader(h, op.header);
  sends_.push(op);
}

void Connection::postRecv(void* data, size_t bytes, uint64_t tag, transport::Cookie cookie) {
  if (!inWarm_ && bytes >= kWarmBytes) warm(inRing_, &inWarm_, false);
  recvs_.push(RecvOp{static_cast<uint8_t*>(data), bytes, 0, recvSeq_++, tag, cookie, call_});
}

void Connection::peerGone() const { peerLeft("exited or crashed (its process is gone)"); }

void Connection::peerLeft(const char* how) const {
  // A rank that failed published why before it closed its rings or exited: that text names
  // where the failure began (and its code), and wins over the symptom seen here.
  Errc code = Errc::Remote;
  const std::string why = world_.failureOf(peer_, &code);
  if (!why.empty()) throw PeerFailure(why, code);
  fail(Errc::Remote, "%s %s", peerName().c_str(), how);
}

void Connection::copyOut(uint8_t* dst, uint64_t from, size_t n) const {
  size_t pos = static_cast<size_t>(from % ringBytes_);
  size_t first = std::min<size_t>(n, ringBytes_ - pos);
  memcpy(dst, inRing_ + pos, first);
  if (n > first) memcpy(dst + first, inRing_, n - first);
}

bool Connection::progressSends(std::vector<transport::Cookie>& completed) {
  if (out_->receiverClosed.load(std::memory_order_acquire))
    peerLeft("closed its communicator while this rank was sending to it");
  uint64_t head = out_->head.load(std::memory_order_relaxed);
  const uint64_t start = head;
  uint64_t space = ringBytes_ - (head - out_->tail.load(std::memory_order_acquire));
  while (!sends_.empty() && space > 0) {
    SendOp& op = sends_.front();
    // Header, then payload, as far as the ring has room.
    while (space > 0 && op.sent < kFrameHeaderBytes + op.bytes) {
      const uint8_t* src = op.sent < kFrameHeaderBytes ? op.header + op.sent : op.data + (op.sent - kFrameHeaderBytes);
      size_t left = op.sent < kFrameHeaderBytes ? kFrameHeaderBytes - op.sent : kFrameHeaderBytes + op.bytes - op.sent;
      size_t pos = static_cast<size_t>(head % ringBytes_);
      size_t n = std::min<size_t>({left, static_cast<size_t>(space), ringBytes_ - pos});
      memcpy(outRing_ + pos, src, n);
      op.sent += n;
      head += n;
      space -= n;
    }
    if (op.sent < kFrameHeaderBytes + op.bytes) break;
    completed.push_back(op.cookie);
    sends_.pop();
  }
  if (head == start) return false;
  out_->head.store(head, std::memory_order_release);
  world_.wake(peer_);
  return true;
}

bool Connection::progressRecvs(std::vector<transport::Cookie>& completed) {
  uint64_t tail = in_->tail.load(std::memory_order_relaxed);
  const uint64_t start = tail;
  uint64_t avail = in_->head.load(std::memory_order_acquire) - tail;
  if (avail > ringBytes_) fail(Errc::Remote, "%s corrupted its ring (%llu bytes pending)", peerName().c_str(),
                               static_cast<unsigned long long>(avail));
  while (!recvs_.empty()) {
    RecvOp& r = recvs_.front();
    if (!headerOk_) {
      if (avail < kFrameHeaderBytes) break;
      uint8_t hdr[kFrameHeaderBytes];
      copyOut(hdr, tail, kFrameHeaderBytes);
      FrameHeader h;
      std::string why;
      switch (decodeFrameHeader(hdr, Expectation{r.seq, r.bytes, r.tag, r.call}, &h, &why)) {
        case FrameCheck::Bad: fail(Errc::Remote, "%s: %s", peerName().c_str(), why.c_str());
        case FrameCheck::Mismatch: fail(Errc::InvalidUsage, "%s: %s", peerName().c_str(), why.c_str());
        case FrameCheck::Abort: {
          if (avail < kFrameHeaderBytes + h.length) return false;  // the reason is on its way
          uint8_t text[kMaxAbortText];
          copyOut(text, tail + kFrameHeaderBytes, static_cast<size_t>(h.length));
          throw PeerFailure(peerText(text, static_cast<size_t>(h.length)), peerCode(h.tag));
        }
        case FrameCheck::Ok: break;
      }
      tail += kFrameHeaderBytes;
      avail -= kFrameHeaderBytes;
      headerOk_ = true;
    }
    size_t n = static_cast<size_t>(std::min<uint64_t>(avail, r.bytes - r.got));
    if (n) {
      copyOut(r.data + r.got, tail, n);
      r.got += n;
      tail += n;
      avail -= n;
    }
    if (r.got < r.bytes) break;
    completed.push_back(r.cookie);
    recvs_.pop();
    headerOk_ = false;
  }
  if (tail != start) {
    in_->tail.store(tail, std::memory_order_release);
    world_.wake(peer_);
  }
  if (!recvs_.empty() && avail == 0 && in_->senderClosed.load(std::memory_order_acquire) &&
      in_->head.load(std::memory_order_acquire) == tail)
    peerLeft("closed the connection (it exited, crashed or closed its communicator)");
  return tail != start;
}

bool Connection::pendingFrame(uint16_t* call, uint64_t* tag) {
  if (closed_ || !recvs_.empty() || headerOk_) return false;
  const uint64_t tail = in_->tail.load(std::memory_order_relaxed);
  const uint64_t avail = in_->head.load(std::memory_order_acquire) - tail;
  if (avail < kFrameHeaderBytes || avail > ringBytes_) return false;
  uint8_t hdr[kFrameHeaderBytes];
  copyOut(hdr, tail, kFrameHeaderBytes);
  const FrameHeader h = peekFrameHeader(hdr);
  if (h.type == FrameType::Abort) {
    if (h.length > kMaxAbortText || avail < kFrameHeaderBytes + h.length) return false;  // on its way, or bad (read will say)
    uint8_t text[kMaxAbortText];
    copyOut(text, tail + kFrameHeaderBytes, static_cast<size_t>(h.length));
    throw PeerFailure(peerText(text, static_cast<size_t>(h.length)), peerCode(h.tag));
  }
  *call = h.call;
  *tag = h.tag;
  return true;
}

bool Connection::progress(std::vector<transport::Cookie>& completed) {
  if (closed_) fail(Errc::Remote, "the shared-memory connection to %s is closed", peerName().c_str());
  bool moved = false;
  if (!sends_.empty()) moved |= progressSends(completed);
  if (!recvs_.empty()) moved |= progressRecvs(completed);
  return moved;
}

bool Connection::canSend() const {
  if (sends_.empty()) return false;
  return out_->head.load(std::memory_order_relaxed) - out_->tail.load(std::memory_order_acquire) < ringBytes_ ||
         out_->receiverClosed.load(std::memory_order_acquire);
}

bool Connection::canRecv() const {
  if (recvs_.empty()) return false;
  return in_->head.load(std::memory_order_acquire) != in_->tail.load(std::memory_order_relaxed) ||
         in_->senderClosed.load(std::memory_order_acquire);
}

bool Connection::armWakeup() {
  world_.armDoorbell();
  if (canSend() || canRecv()) return false;
  const Peer& p = world_.peers[peer_];
  if (!p.process.alive()) peerGone();
  return true;
}

void Connection::disarmWakeup() { world_.disarmDoorbell(); }

void Connection::addPollFds(std::vector<pollfd>& fds) const {
  fds.push_back(pollfd{world_.doorbell.get(), POLLIN, 0});
  const Peer& p = world_.peers[peer_];
  if (p.process.pidfd() >= 0) fds.push_back(pollfd{p.process.pidfd(), POLLIN, 0});
}

void Connection::shutdown(const std::string& reason, Errc code) noexcept {
  if (closed_) return;
  closed_ = true;
  // An abort frame goes out only at a frame boundary and if the ring has room for it.
  std::string text = reason.substr(0, kMaxAbortText);
  uint64_t head = out_->head.load(std::memory_order_relaxed);
  uint64_t space = ringBytes_ - (head - out_->tail.load(std::memory_order_acquire));
  bool atBoundary = sends_.empty() || sends_.front().sent == 0;
  if (!reason.empty() && atBoundary && space >= kFrameHeaderBytes + text.size()) {
    uint8_t buf[kFrameHeaderBytes + kMaxAbortText];
    FrameHeader h;
    h.type = FrameType::Abort;
    h.length = text.size();
    h.tag = static_cast<uint64_t>(code);  // an abort frame's tag carries the cause's code
    encodeFrameHeader(h, buf);
    memcpy(buf + kFrameHeaderBytes, text.data(), text.size());
    for (size_t i = 0; i < kFrameHeaderBytes + text.size(); ++i) outRing_[(head + i) % ringBytes_] = buf[i];
    out_->head.store(head + kFrameHeaderBytes + text.size(), std::memory_order_release);
  }
  out_->senderClosed.store(1, std::memory_order_release);
  in_->receiverClosed.store(1, std::memory_order_release);
  world_.wake(peer_);
  sends_.clear();
  recvs_.clear();
}

}  // namespace hora::shm
