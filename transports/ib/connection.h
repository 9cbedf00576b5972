// A verbs connection to one peer: reliable-connected queue pairs (HORA_IB_QPS_PER_PEER of them)
// on one completion queue, whose completion channel is the descriptor an idle rank sleeps on.
//
// Every message starts with a frame on queue pair 0: a SEND into one of the receive slots the
// peer keeps posted (a registered ring of kRecvSlots slots), holding transports/frame.h's header
// (checked by the receiver against its posted receive, as over TCP) and an extension (below).
//   - eager (payload <= kEagerBytes): the payload follows the header in the same SEND, copied
//     into a registered send slot, so the send completes as soon as it is posted;
//   - rendezvous (larger): the frame is only the header (RTS). The receiver, as soon as it has
//     posted the receive (not waiting for the RTS), registers the buffer and answers with a CTS
//     frame: what it expects (sequence, length, tag, call) and where to write (address, rkey).
//     The sender checks the CTS against its message (holding a mismatched one back: the receiver
//     finds the mismatch in the RTS) and RDMA-writes the payload straight from
//     its buffer into the receiver's, striped across the queue pairs, each stripe's last write
//     carrying the message's sequence as immediate data. The receive completes when its RTS and
//     every stripe have come.
// Flow control: frames that wait in a slot until a receive takes them (eager, RTS) may use the
// peer's slots down to kReserve; control frames (CTS, credit), taken at once, may use the
// reserve; one slot is kept for the abort frame. Every frame carries the count of slots this
// side has posted again (cumulative), and a credit frame carries only that, when enough is owed.
// At most kMaxCts rendezvous receives are open at once; each uses one receive per queue pair
// for its immediate data, so those never compete with frames.
//
// Failures: a completion in error (retry exceeded, remote access error, a flushed queue pair)
// fails the connection naming the peer. A side that waits without hearing from the peer for
// kProbeAfter writes 8 bytes into the peer's landing word: a peer whose process died no longer
// answers, and the write fails within the retry budget (about half a second), or is refused;
// one that stays unanswered for kProbeDead while nothing else sent completes either (a large
// message goes as writes of at most kWriteBytes, so a live peer acknowledges one every few
// milliseconds) fails the connection too.
#pragma once
#include <infiniband/verbs.h>

#include <chrono>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "transports/frame.h"
#include "transports/ib/device.h"
#include "transports/ib/mrcache.h"
#include "transports/transport.h"

namespace hora::ib {

// What each end tells the other to connect one queue pair (from the peer records).
struct QpAddress {
  uint32_t qpn = 0;
  uint32_t psn = 0;
};
struct PeerEnd {
  bool ethernet = false;
  ibv_gid gid{};
  uint16_t lid = 0;
  ibv_mtu mtu = IBV_MTU_1024;
  uint64_t landingAddr = 0;
  uint32_t landingRkey = 0;
  std::vector<QpAddress> qps;  // the peer's queue pairs for this rank
};

// The queue pairs of one peer, made before the peer records are exchanged (their numbers go
// into this rank's record); a Connection takes them over.
class QueuePairs {
 public:
  QueuePairs(std::shared_ptr<Device> dev, int nqps);
  ~QueuePairs();
  QueuePairs(const QueuePairs&) = delete;
  QueuePairs& operator=(const QueuePairs&) = delete;
  std::vector<QpAddress> addresses() const;

 private:
  friend class Connection;
  std::shared_ptr<Device> dev_;
  ibv_comp_channel* channel_ = nullptr;
  ibv_cq* cq_ = nullptr;
  std::vector<ibv_qp*> qps_;
  std::vector<uint32_t> psns_;
  int cqDepth_ = 0, sqDepth_ = 0, rqDepth_ = 0;
};

class Connection final : public transport::Connection {
 public:
  std::shared_ptr<void> registerMemory(const void* p, size_t bytes) override;
  static constexpr size_t kEagerBytes = 8192;
  static constexpr size_t kExtBytes = 32;
  static constexpr size_t kFrameBytes = frame::kFrameHeaderBytes + kExtBytes;
  static constexpr size_t kSlotBytes = kFrameBytes + kEagerBytes;
  static constexpr int kRecvSlots = 128;
  static constexpr int kMaxCts = 32;
  static constexpr int kReserve = 8;
  static constexpr int kCreditBatch = 4;  // below kReserve: control frames never starve the reserve
  static constexpr int kSendSlots = 64;
  static constexpr size_t kMinStripe = size_t(64) << 10;
  static constexpr std::chrono::milliseconds kProbeAfter{1000};
  static constexpr std::chrono::milliseconds kProbeDead{5000};
  static constexpr size_t kWriteBytes = size_t(8) << 20;  // the largest RDMA write (see startWrites)

  // Brings the queue pairs to RTS towards the peer's; posts the receive slots.
  Connection(std::unique_ptr<QueuePairs> qps, const PeerEnd& peer, std::string peerName);
  ~Connection() override;

  void postSend(const void* data, size_t bytes, uint64_t tag, transport::Cookie cookie) override;
  void postRecv(void* data, size_t bytes, uint64_t tag, transport::Cookie cookie) override;
  bool progress(std::vector<transport::Cookie>& completed) override;
  bool busy() const override;
  void addPollFds(std::vector<pollfd>& fds) const override;
  bool armWakeup() override;
  void disarmWakeup() override;
  void finishPartial(std::chrono::steady_clock::time_point until) noexcept override { flushUntil_ = until; }
  void setCall(uint16_t call) override { call_ = call; }
  bool pendingFrame(uint16_t* call, uint64_t* tag) override;
  void shutdown(const std::string& reason, Errc code) noexcept override;
  const std::string& peerName() const override { return peer_; }

 private:
  enum class Kind : uint32_t { Eager = 1, Rts = 2, Cts = 3, Credit = 4, Abort = 5 };
  struct SendOp {
    const uint8_t* data;
    size_t bytes;
    uint64_t tag, seq;
    transport::Cookie cookie;
    uint16_t call;
    bool headerSent = false, ctsSeen = false, done = false;
    int writesLeft = 0;
    MrCache::Handle mr;
  };
  struct RecvOp {
    uint8_t* data;
    size_t bytes;
    uint64_t tag, seq;
    transport::Cookie cookie;
    uint16_t call;
    bool large, ctsSent = false, header = false, done = false;
    int stripesLeft = 0;
    MrCache::Handle mr;
  };
  struct Cts {
    uint64_t seq, length, tag;
    uint16_t call;
    uint64_t addr;
    uint32_t rkey;
  };

  void handle(const ibv_wc& wc);
  void onFrame(int slot, uint32_t bytes);
  void onData(uint32_t imm);
  void postRecvSlot(int slot);
  void postRecvData(int qp);
  // Posts a frame on queue pair 0 from a send slot; false when there is no slot, no room in
  // the send queue or (unless `abort`) not enough of the peer's slots for its kind.
  bool postFrame(Kind kind, const frame::FrameHeader& h, const void* payload, size_t payloadBytes, uint64_t addr = 0,
                 uint32_t rkey = 0, bool abort = false);
  bool advanceSends();
  bool advanceRecvs();
  bool startWrites(SendOp& op, const Cts& cts);
  void completeRecv(RecvOp& r);
  int stripesFor(size_t bytes) const;
  int credits() const;
  bool pollCq();
  [[noreturn]] void failWire(const std::string& why);
  [[noreturn]] void failCompletion(const ibv_wc& wc);
  SendOp* sendAt(uint64_t seq);
  RecvOp* recvAt(uint64_t seq);

  // The device first, so that it goes last: every registration and queue pair below needs it.
  std::shared_ptr<Device> dev_;
  // Registered slabs: receive slots, send slots (+ the probe's source word). Their registrations
  // are declared next, so they go after the queue pairs and before the memory (and even when the
  // constructor throws half way).
  std::vector<uint8_t> recvSlab_, sendSlab_;
  struct Slabs {
    ibv_mr* recv = nullptr;
    ibv_mr* send = nullptr;
    ~Slabs();
  } slabs_;
  std::unique_ptr<QueuePairs> q_;
  std::string peer_;
  PeerEnd end_;
  int nqps_;
  ibv_mr* recvMr_ = nullptr;
  ibv_mr* sendMr_ = nullptr;
  std::vector<int> freeSendSlots_;
  std::vector<int> sqUsed_;
  std::deque<int> arrived_;  // slots holding eager or RTS frames, in order
  std::deque<Cts> cts_;
  std::deque<SendOp> sends_;
  std::deque<RecvOp> recvs_;
  std::vector<ibv_wc> stash_;  // completions polled by armWakeup
  std::vector<transport::Cookie> done_;  // completed, for the next progress()
  uint64_t sendSeq_ = 0, recvSeq_ = 0;
  uint64_t nextFrameSeq_ = 0;   // the first send whose frame is not out yet
  uint64_t nextHeaderSeq_ = 0;  // the first receive still without its frame
  uint64_t nextCtsSeq_ = 0;     // the first receive whose CTS (if large) is not out yet
  uint16_t call_ = 0;
  // Flow control (counts modulo 2^32).
  uint32_t framesSent_ = 0, peerReposted_ = 0;  // mine to the peer; the peer's slots posted again
  uint32_t reposted_ = 0, reported_ = 0;        // of my slots; the last count told to the peer
  int ctsOpen_ = 0;
  bool ctsSeen_ = false;  // a CTS has come; lastCts_ is its sequence
  uint64_t lastCts_ = 0;
  bool abortSent_ = false;
  size_t outstanding_ = 0;
  unsigned unacked_ = 0;  // completion events not yet acknowledged
  bool armed_ = false;
  bool probing_ = false;
  // lastHeard_: the last receive or probe completion; lastAcked_: the last completion of anything
  // this side sent (the peer's device acknowledged it).
  std::chrono::steady_clock::time_point lastHeard_, lastAcked_, probeSince_;
  std::chrono::steady_clock::time_point flushUntil_{};
  bool closed_ = false;
  std::string closedReason_;
};

}  // namespace hora::ib
