// A shared-memory connection to one rank of this host: a ring per direction, each in its
// sender's segment, carrying the same frames as TCP (transports/frame.h) with the same checks.
// The sender copies a message into the ring as space frees up; the receiver copies it out into
// the caller's buffer. No syscall on the way unless a side is asleep (world.h's doorbells).
// A peer that dies is seen through its pidfd (or its pid and start time) when nothing is left to read.
#pragma once
#include <string>

#include "base/ring.h"
#include "transports/frame.h"
#include "transports/shm/world.h"
#include "transports/transport.h"

namespace hora::shm {

class Connection final : public transport::Connection {
 public:
  Connection(const World& world, uint32_t peerLocal);
  ~Connection() override { shutdown(std::string(), Errc::Remote); }  // closed, without an abort frame

  void postSend(const void* data, size_t bytes, uint64_t tag, transport::Cookie cookie) override;
  void postRecv(void* data, size_t bytes, uint64_t tag, transport::Cookie cookie) override;
  bool progress(std::vector<transport::Cookie>& completed) override;
  bool busy() const override { return !sends_.empty() || !recvs_.empty(); }
  void addPollFds(std::vector<pollfd>& fds) const override;
  bool armWakeup() override;
  void disarmWakeup() override;
  void shutdown(const std::string& reason, Errc code) noexcept override;
  void setCall(uint16_t call) override { call_ = call; }
  bool pendingFrame(uint16_t* call, uint64_t* tag) override;
  size_t unreadMost() const override { return 256; }  // 256 small frames: a few pages of the ring
  const std::string& peerName() const override;

 private:
  struct SendOp {
    const uint8_t* data;
    size_t bytes;
    size_t sent;  // of header + payload
    transport::Cookie cookie;
    uint8_t header[frame::kFrameHeaderBytes];
  };
  struct RecvOp {
    uint8_t* data;
    size_t bytes;
    size_t got;  // of the payload
    uint64_t seq, tag;
    transport::Cookie cookie;
    uint16_t call;
  };

  bool progressSends(std::vector<transport::Cookie>& completed);
  bool progressRecvs(std::vector<transport::Cookie>& completed);
  bool canSend() const;
  bool canRecv() const;
  void copyOut(uint8_t* dst, uint64_t from, size_t n) const;
  [[noreturn]] void peerGone() const;
  // The peer will not answer (`how`): throws its own failure text, if it published one.
  [[noreturn]] void peerLeft(const char* how) const;

  const World& world_;
  uint32_t peer_;
  uint16_t call_ = 0;
  RingCtl* out_;  // this rank -> peer, in this rank's segment
  uint8_t* outRing_;
  RingCtl* in_;   // peer -> this rank, in the peer's segment
  const uint8_t* inRing_;
  uint64_t ringBytes_;
  RingQueue<SendOp> sends_{64};
  RingQueue<RecvOp> recvs_{64};
  uint64_t sendSeq_ = 0, recvSeq_ = 0;
  bool headerOk_ = false;  // the head receive's header has been read and checked
  bool closed_ = false;
  // Whether this rank has mapped each ring whole (warm()): at the first message of kWarmBytes
  // or more in that direction.
  bool outWarm_ = false, inWarm_ = false;
  void warm(const void* ring, bool* done, bool write);
};

}  // namespace hora::shm
