// A TCP connection to one peer over one or more sockets. Message k of a direction travels on
// socket k % nsocks, so consecutive chunks of a pipelined collective use all sockets at once
// while each socket stays a plain ordered stream. Sends leave straight from the caller's
// buffer (several queued frames per sendmsg); receives land straight in the caller's buffer
// after their header has been checked.
#pragma once
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "base/ring.h"
#include "base/socket.h"
#include "transports/frame.h"
#include "transports/transport.h"

namespace hora::tcp {

using namespace frame;

class Connection final : public transport::Connection {
 public:
  // A frame whose payload is at most this is read with its header in one recv().
  static constexpr size_t kSmallPayload = 4096;
  // The largest data frame a stuck sender looks behind for the peer's abort frame.
  static constexpr size_t kMaxPeekBehind = size_t(1) << 20;
  // postHeld: the largest message held back (copied into its op), and how many are held
  // before they go out on their own, in one write a socket (a rank's call checks for a
  // successor it sends nothing: 64 calls' in one write per socket, where 16 made the checks an
  // eighth of a 4-rank Reduce's sendmsg calls; the peer takes them in batches of
  // comm/call_check.h's kCheckBatch, 16, from what has come).
  static constexpr size_t kHeldBytes = 8;
  static constexpr size_t kHeldMost = 64;
  // How long a connection closed without a failure waits for the peer's end to acknowledge what
  // it wrote (the destructor).
  static constexpr int kCloseAckMs = 1000;

  // sockets[i] must be connected and handshaken; they become this connection's.
  Connection(std::vector<Fd> sockets, std::string peerName);
  ~Connection() override;

  void postSend(const void* data, size_t bytes, uint64_t tag, transport::Cookie cookie) override;
  void postRecv(void* data, size_t bytes, uint64_t tag, transport::Cookie cookie) override;
  void postHeld(const void* data, size_t bytes, uint64_t tag, transport::Cookie cookie) override;
  bool releaseHeld() override;
  bool holding() const override { return held_ > 0 && !release_; }
  bool holdsBack() const override { return true; }
  bool progress(std::vector<transport::Cookie>& completed) override;
  bool busy() const override;
  void addPollFds(std::vector<pollfd>& fds) const override;
  void finishPartial(std::chrono::steady_clock::time_point until) noexcept override;
  void setCall(uint16_t call) override { call_ = call; }
  bool pendingFrame(uint16_t* call, uint64_t* tag) override;
  size_t takePendingFrames(size_t most, AcceptFrame accept, void* ctx) override;
  // The call check's window over TCP: as many calls as the kernel buffers of small messages
  // anyway. Without the check, a rank whose calls only send (a Reduce's leaf, a Broadcast's
  // root) runs ahead of its peers by what the sockets hold: megabytes on Linux (one link held
  // over 4,000 calls of 1 KiB in the fault tests), tens of thousands of 8-byte calls. A rank
  // never runs more than a window ahead of its predecessor's checks, so a narrower window
  // made such a rank wait for its predecessor where it did not without the check: measured
  // with reduce_perf, 8 bytes at 4 ranks on 2 cores, 20,400 calls, the slowest rank's time
  // (-a 3), medians of 5 alternating rounds, the check cost 1.23x with 1024 and 0.96x with
  // 16384 (0.99x for broadcast_perf), and 1.01x over 100,400 calls, where the ranks run a whole
  // window apart for most of the run. 16384 frames of 33 bytes are 528 KiB at most unread
  // (the frames past what the kernel holds wait in this side's queue: nothing waits for them);
  // the call numbers frames carry (modulo 65536) stay unambiguous within two windows.
  static constexpr size_t kUnreadMost = 16384;
  size_t unreadMost() const override { return kUnreadMost; }
  void shutdown(const std::string& reason, Errc code) noexcept override;
  const std::string& peerName() const override { return peer_; }

 private:
  struct SendOp {
    const uint8_t* data;
    size_t bytes;
    size_t sent;  // of header + payload
    transport::Cookie cookie;
    bool held;  // posted by postHeld: completed already, its payload in `copy`
    uint8_t header[kFrameHeaderBytes];
    uint8_t copy[kHeldBytes];
    const uint8_t* payload() const { return held ? copy : data; }
  };
  static_assert(offsetof(SendOp, copy) == offsetof(SendOp, header) + kFrameHeaderBytes,
                "a held message's header and payload are written as one piece");
  struct RecvOp {
    uint8_t* data;
    size_t bytes;
    size_t got;  // of the payload
    uint64_t seq, tag;
    transport::Cookie cookie;
    uint16_t call;
  };
  struct Socket {
    Fd fd;
    RingQueue<SendOp> sends{64};
    RingQueue<RecvOp> recvs{64};
    // A header, or a whole small frame; where no receive is inside a frame (!headerOk), the
    // headerGot bytes from header + headerAt are the first of what the peer sent and no receive
    // has taken: read ahead, at a frame's start, the socket's data following them. A receive
    // that takes a frame from there moves headerAt past it (moving what is left to the start
    // after each frame cost a read of k frames k times their bytes); what is left moves to the
    // start only before the next read from the socket, once a read.
    uint8_t header[kFrameHeaderBytes + kSmallPayload];
    size_t headerGot = 0;
    size_t headerAt = 0;
    const uint8_t* buffered() const { return header + headerAt; }
    bool headerOk = false;  // the head receive's header has been checked
    std::string abortText;  // an abort frame being read
    size_t abortWant = 0;
    uint64_t abortCode = 0;  // the code the abort frame carries (its tag)
    bool readingAbort = false;
    // A socket that only sends is read for an abort frame when its sends are stuck; a data
    // frame found there instead belongs to a later receive and waits for it (and the socket is
    // not polled for input until then).
    bool dataWaiting = false;
    size_t peekedAvail = 0;  // the bytes waiting when checkForAbort last looked behind that frame
    unsigned stuck = 0;      // passes on which nothing could be written
  };

  void pushSend(const void* data, size_t bytes, uint64_t tag, transport::Cookie cookie, bool held);
  // Whether the send at the front of s may go out now (a held one waits for a release).
  bool sendable(const Socket& s) const { return !s.sends.empty() && (release_ || !s.sends.front().held); }
  bool progressSends(Socket& s, std::vector<transport::Cookie>& completed);
  bool progressRecvs(Socket& s, std::vector<transport::Cookie>& completed);
  bool readAbort(Socket& s);
  // Looks, without consuming anything else, for an abort frame at the head of what the peer
  // sent on s (no receive in progress there); reads it and throws it if there is one.
  void checkForAbort(Socket& s);
  // After a send failed (the peer reset the connection): the peer's abort frame may still be
  // in the socket behind data frames that no receive wants any more; throws it if found.
  void salvageAbort(Socket& s);
  [[noreturn]] void failWire(const std::string& why);
  // What the peer sent on s and no receive has taken (no receive inside a frame there): the
  // bytes read ahead into s.header, then the socket's. peekStream: copies up to n of them,
  // consuming nothing (what it copied, or recv()'s result where it copied nothing);
  // takeBuffered: takes up to n of those read ahead; consumeStream: takes n, which a peek has
  // seen (false if fewer came).
  ssize_t peekStream(Socket& s, uint8_t* out, size_t n);
  size_t takeBuffered(Socket& s, void* out, size_t n);
  bool consumeStream(Socket& s, uint8_t* out, size_t n);

  std::vector<Socket> socks_;
  std::string peer_;
  uint64_t sendSeq_ = 0, recvSeq_ = 0;
  uint16_t call_ = 0;
  std::chrono::steady_clock::time_point flushUntil_{};  // set by finishPartial
  size_t outstanding_ = 0;
  // postHeld: the held sends not yet out (on any socket); once released (by releaseHeld, a
  // send posted behind them, or kHeldMost held) all of them go out, and holding starts again
  // when none is left. Their cookies are reported by the next progress().
  size_t held_ = 0;
  bool release_ = false;
  // A write of held messages alone failed: the peer closed its end (it closed its communicator,
  // and needs them no more) or is gone (which what it waits for shows). They are dropped, and
  // so are those held later; a message that is not held still fails there.
  bool heldDropped_ = false;
  std::vector<transport::Cookie> early_;
  // takePendingFrames: what waits on each socket, peeked at (kPeekBytes a socket, for at most
  // kMaxSockets sockets: HORA_NSOCKS_PERPEER's most).
  static constexpr size_t kPeekBytes = 16384;
  static constexpr size_t kMaxSockets = 16;
  static constexpr size_t kSmallFrameMost = 64;  // the largest payload it takes
  std::vector<uint8_t> peek_;
  bool closed_ = false;
  std::string closedReason_;
};

}  // namespace hora::tcp
