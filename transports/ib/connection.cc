#include "transports/ib/connection.h"

#include <arpa/inet.h>
#include <fcntl.h>

#include <algorithm>
#include <cstring>
#include <random>

#include "base/error.h"
#include "base/log.h"
#include "base/wait.h"

namespace hora::ib {

using namespace frame;

namespace {

// Work request ids: what completed, on which queue pair, and which slot or message.
enum WrKind : uint64_t { kRecvSlot = 1, kRecvData = 2, kSendSlot = 3, kWrite = 4, kProbe = 5 };
uint64_t wrId(WrKind k, int qp, uint64_t value) {
  return (uint64_t(k) << 56) | (uint64_t(qp & 0xff) << 48) | (value & ((uint64_t(1) << 48) - 1));
}
WrKind wrKind(uint64_t id) { return static_cast<WrKind>(id >> 56); }
int wrQp(uint64_t id) { return static_cast<int>((id >> 48) & 0xff); }
uint64_t wrValue(uint64_t id) { return id & ((uint64_t(1) << 48) - 1); }

template <typename T>
void put(uint8_t* p, T v) {
  memcpy(p, &v, sizeof v);
}
template <typename T>
T get(const uint8_t* p) {
  T v;
  memcpy(&v, p, sizeof v);
  return v;
}

// The extension after the frame header: kind, credits, rkey, 0, addr, 0.
constexpr size_t kExtKind = kFrameHeaderBytes, kExtCredits = kFrameHeaderBytes + 4, kExtRkey = kFrameHeaderBytes + 8,
                 kExtAddr = kFrameHeaderBytes + 16;

bool newer(uint32_t a, uint32_t b) { return static_cast<int32_t>(a - b) > 0; }

const char* opName(ibv_wc_opcode op, WrKind k) {
  switch (k) {
    case kRecvSlot: case kRecvData: return "a receive";
    case kWrite: return "an RDMA write of a message";
    case kProbe: return "an RDMA write that checks the peer is there";
    default: return op == IBV_WC_SEND ? "a send" : "a work request";
  }
}

void modify(ibv_qp* qp, ibv_qp_attr& a, int mask, const char* state, const std::string& peer) {
  if (int rc = ibv_modify_qp(qp, &a, mask))
    fail(Errc::System, "ib: cannot bring the queue pair to %s (towards %s): %s", state, peer.c_str(), errnoText(rc).c_str());
}

}  // namespace

// ---- queue pairs -----------------------------------------------------------------------------

QueuePairs::QueuePairs(std::shared_ptr<Device> dev, int nqps) : dev_(std::move(dev)) {
  const int maxWr = static_cast<int>(std::min<uint32_t>(dev_->maxQpWr(), 1024));
  sqDepth_ = std::min(256, maxWr);
  rqDepth_ = std::min(Connection::kRecvSlots, maxWr);
  if (rqDepth_ < Connection::kRecvSlots)
    fail(Errc::System, "ib: %s allows %d work requests per queue, fewer than the %d receive slots needed",
         dev_->port().device.c_str(), maxWr, Connection::kRecvSlots);
  cqDepth_ = nqps * (sqDepth_ + rqDepth_) + 16;
  channel_ = ibv_create_comp_channel(dev_->ctx());
  if (!channel_) fail(Errc::System, "ib: cannot create a completion channel: %s", errnoText(errno).c_str());
  const int fl = fcntl(channel_->fd, F_GETFL);
  fcntl(channel_->fd, F_SETFL, fl | O_NONBLOCK);
  cq_ = ibv_create_cq(dev_->ctx(), cqDepth_, nullptr, channel_, 0);
  if (!cq_) fail(Errc::System, "ib: cannot create a completion queue of %d entries: %s", cqDepth_, errnoText(errno).c_str());
  std::random_device rd;
  for (int i = 0; i < nqps; ++i) {
    ibv_qp_init_attr ia{};
    ia.send_cq = cq_;
    ia.recv_cq = cq_;
    ia.qp_type = IBV_QPT_RC;
    ia.cap.max_send_wr = static_cast<uint32_t>(sqDepth_);
    ia.cap.max_recv_wr = static_cast<uint32_t>(rqDepth_);
    ia.cap.max_send_sge = 1;
    ia.cap.max_recv_sge = 1;
    ibv_qp* qp = ibv_create_qp(dev_->pd(), &ia);
    if (!qp) fail(Errc::System, "ib: cannot create a queue pair on %s: %s", dev_->port().device.c_str(), errnoText(errno).c_str());
    qps_.push_back(qp);
    psns_.push_back(rd() & 0xffffff);
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_INIT;
    a.pkey_index = 0;
    a.port_num = static_cast<uint8_t>(dev_->port().port);
    a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_LOCAL_WRITE;
    modify(qp, a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS, "INIT", "its peer");
  }
}

QueuePairs::~QueuePairs() {
  for (ibv_qp* qp : qps_) ibv_destroy_qp(qp);
  if (cq_) ibv_destroy_cq(cq_);
  if (channel_) ibv_destroy_comp_channel(channel_);
}

std::vector<QpAddress> QueuePairs::addresses() const {
  std::vector<QpAddress> a;
  for (size_t i = 0; i < qps_.size(); ++i) a.push_back(QpAddress{qps_[i]->qp_num, psns_[i]});
  return a;
}

// ---- connection ------------------------------------------------------------------------------

Connection::Connection(std::unique_ptr<QueuePairs> qps, const PeerEnd& peer, std::string peerName)
    : dev_(qps->dev_), q_(std::move(qps)), peer_(std::move(peerName)), end_(peer), nqps_(static_cast<int>(q_->qps_.size())) {
  if (end_.qps.size() != q_->qps_.size())
    fail(Errc::Remote, "%s offers %zu queue pairs for this rank, this rank has %zu", peer_.c_str(), end_.qps.size(),
         q_->qps_.size());
  recvSlab_.assign(static_cast<size_t>(kRecvSlots) * kSlotBytes, 0);
  sendSlab_.assign(static_cast<size_t>(kSendSlots) * kSlotBytes + 64, 0);
  slabs_.recv = recvMr_ = ibv_reg_mr(dev_->pd(), recvSlab_.data(), recvSlab_.size(), IBV_ACCESS_LOCAL_WRITE);
  slabs_.send = sendMr_ = ibv_reg_mr(dev_->pd(), sendSlab_.data(), sendSlab_.size(), IBV_ACCESS_LOCAL_WRITE);
  if (!recvMr_ || !sendMr_) fail(Errc::System, "ib: cannot register the slots for %s: %s", peer_.c_str(), errnoText(errno).c_str());
  for (int i = kSendSlots - 1; i >= 0; --i) freeSendSlots_.push_back(i);
  sqUsed_.assign(static_cast<size_t>(nqps_), 0);
  const PortChoice& me = dev_->port();
  for (int i = 0; i < nqps_; ++i) {
    ibv_qp* qp = q_->qps_[static_cast<size_t>(i)];
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = std::min(me.mtu, end_.mtu);
    a.dest_qp_num = end_.qps[static_cast<size_t>(i)].qpn;
    a.rq_psn = end_.qps[static_cast<size_t>(i)].psn;
    a.max_dest_rd_atomic = 1;
    a.min_rnr_timer = 12;  // 0.64 ms
    a.ah_attr.port_num = static_cast<uint8_t>(me.port);
    if (me.ethernet) {
      a.ah_attr.is_global = 1;
      a.ah_attr.grh.dgid = end_.gid;
      a.ah_attr.grh.sgid_index = static_cast<uint8_t>(me.gidIndex);
      a.ah_attr.grh.hop_limit = 255;
    } else {
      a.ah_attr.dlid = end_.lid;
    }
    modify(qp, a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                  IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER, "RTR", peer_);
    ibv_qp_attr s{};
    s.qp_state = IBV_QPS_RTS;
    s.timeout = 14;    // 4.096 us * 2^14 = 67 ms per try
    s.retry_cnt = 7;   // tries before a silent peer is an error: about half a second
    s.rnr_retry = 7;   // a peer with no receive posted yet: wait (flow control keeps that rare)
    s.sq_psn = q_->psns_[static_cast<size_t>(i)];
    s.max_rd_atomic = 1;
    modify(qp, s, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                  IBV_QP_MAX_QP_RD_ATOMIC, "RTS", peer_);
  }
  for (int s = 0; s < kRecvSlots; ++s) postRecvSlot(s);
  for (int i = 1; i < nqps_; ++i)
    for (int k = 0; k < kMaxCts + 4; ++k) postRecvData(i);
  lastHeard_ = lastAcked_ = Clock::now();
}

Connection::Slabs::~Slabs() {
  if (recv) ibv_dereg_mr(recv);
  if (send) ibv_dereg_mr(send);
}

Connection::~Connection() {
  // Completions of the queue pairs go with them; the events already taken must be acknowledged
  // before the completion queue can go.
  if (unacked_) ibv_ack_cq_events(q_->cq_, unacked_);
  for (SendOp& s : sends_) dev_->cache().release(s.mr);
  for (RecvOp& r : recvs_) dev_->cache().release(r.mr);
  q_.reset();  // the queue pairs first: nothing may use the slabs after this (slabs_ goes next)
}

void Connection::postRecvSlot(int slot) {
  ibv_sge sge{reinterpret_cast<uintptr_t>(recvSlab_.data()) + static_cast<size_t>(slot) * kSlotBytes,
              static_cast<uint32_t>(kSlotBytes), recvMr_->lkey};
  ibv_recv_wr wr{};
  wr.wr_id = wrId(kRecvSlot, 0, static_cast<uint64_t>(slot));
  wr.sg_list = &sge;
  wr.num_sge = 1;
  ibv_recv_wr* bad = nullptr;
  if (int rc = ibv_post_recv(q_->qps_[0], &wr, &bad)) failWire(format("cannot post a receive: %s", errnoText(rc).c_str()));
}

void Connection::postRecvData(int qp) {
  ibv_recv_wr wr{};
  wr.wr_id = wrId(kRecvData, qp, 0);
  ibv_recv_wr* bad = nullptr;
  if (int rc = ibv_post_recv(q_->qps_[static_cast<size_t>(qp)], &wr, &bad))
    failWire(format("cannot post a receive: %s", errnoText(rc).c_str()));
}

int Connection::credits() const {
  return (kRecvSlots - kMaxCts - 1) - static_cast<int>(framesSent_ - peerReposted_);
}

int Connection::stripesFor(size_t bytes) const {
  return static_cast<int>(std::max<size_t>(1, std::min<size_t>(static_cast<size_t>(nqps_), bytes / kMinStripe)));
}

void Connection::failWire(const std::string& why) { fail(Errc::Remote, "%s: %s", peer_.c_str(), why.c_str()); }

void Connection::failCompletion(const ibv_wc& wc) {
  const WrKind k = wrKind(wc.wr_id);
  const char* hint = "";
  switch (wc.status) {
    case IBV_WC_RETRY_EXC_ERR:
      hint = " (the peer does not answer: its process is gone, or its device or the link between went down)";
      break;
    case IBV_WC_RNR_RETRY_EXC_ERR: hint = " (the peer posts no receives)"; break;
    case IBV_WC_REM_ACCESS_ERR: hint = " (the peer refused the write: its buffer was deregistered, it has failed)"; break;
    case IBV_WC_WR_FLUSH_ERR: hint = " (the queue pair had failed before)"; break;
    case IBV_WC_REM_OP_ERR: hint = " (the peer's queue pair failed: its process is gone, or it failed)"; break;
    default: break;
  }
  fail(Errc::Remote, "%s: %s failed on queue pair %d: %s%s", peer_.c_str(), opName(wc.opcode, k), wrQp(wc.wr_id),
       ibv_wc_status_str(wc.status), hint);
}

Connection::SendOp* Connection::sendAt(uint64_t seq) {
  if (sends_.empty() || seq < sends_.front().seq || seq >= sends_.front().seq + sends_.size()) return nullptr;
  return &sends_[static_cast<size_t>(seq - sends_.front().seq)];
}

Connection::RecvOp* Connection::recvAt(uint64_t seq) {
  if (recvs_.empty() || seq < recvs_.front().seq || seq >= recvs_.front().seq + recvs_.size()) return nullptr;
  return &recvs_[static_cast<size_t>(seq - recvs_.front().seq)];
}

void Connection::postSend(const void* data, size_t bytes, uint64_t tag, transport::Cookie cookie) {
  SendOp op;
  op.data = static_cast<const uint8_t*>(data);
  op.bytes = bytes;
  op.tag = tag;
  op.seq = sendSeq_++;
  op.cookie = cookie;
  op.call = call_;
  sends_.push_back(op);
  ++outstanding_;
}

void Connection::postRecv(void* data, size_t bytes, uint64_t tag, transport::Cookie cookie) {
  RecvOp op;
  op.data = static_cast<uint8_t*>(data);
  op.bytes = bytes;
  op.tag = tag;
  op.seq = recvSeq_++;
  op.cookie = cookie;
  op.call = call_;
  op.large = bytes > kEagerBytes;
  recvs_.push_back(op);
  ++outstanding_;
}

bool Connection::busy() const { return outstanding_ > 0 || !done_.empty() || !stash_.empty(); }

bool Connection::postFrame(Kind kind, const FrameHeader& h, const void* payload, size_t payloadBytes, uint64_t addr,
                           uint32_t rkey, bool abort) {
  const bool waits = kind == Kind::Eager || kind == Kind::Rts;  // holds a peer slot until matched
  if (!abort && credits() <= (waits ? kReserve : 0)) return false;
  if (freeSendSlots_.empty() || sqUsed_[0] >= q_->sqDepth_) return false;
  const int slot = freeSendSlots_.back();
  freeSendSlots_.pop_back();
  uint8_t* p = sendSlab_.data() + static_cast<size_t>(slot) * kSlotBytes;
  encodeFrameHeader(h, p);
  memset(p + kFrameHeaderBytes, 0, kExtBytes);
  put<uint32_t>(p + kExtKind, static_cast<uint32_t>(kind));
  put<uint32_t>(p + kExtCredits, reposted_);
  put<uint32_t>(p + kExtRkey, rkey);
  put<uint64_t>(p + kExtAddr, addr);
  if (payloadBytes) memcpy(p + kFrameBytes, payload, payloadBytes);
  ibv_sge sge{reinterpret_cast<uintptr_t>(p), static_cast<uint32_t>(kFrameBytes + payloadBytes), sendMr_->lkey};
  ibv_send_wr wr{};
  wr.wr_id = wrId(kSendSlot, 0, static_cast<uint64_t>(slot));
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_SEND;
  wr.send_flags = IBV_SEND_SIGNALED;
  ibv_send_wr* bad = nullptr;
  if (int rc = ibv_post_send(q_->qps_[0], &wr, &bad)) {
    freeSendSlots_.push_back(slot);
    failWire(format("cannot post a send: %s", errnoText(rc).c_str()));
  }
  ++sqUsed_[0];
  if (!abort) ++framesSent_;
  reported_ = reposted_;
  return true;
}

bool Connection::startWrites(SendOp& op, const Cts& cts) {
  // The receiver's expectation against this message: the same check (and words) as a frame
  // header against a posted receive, the roles turned round.
  FrameHeader theirs;
  theirs.seq = cts.seq;
  theirs.length = cts.length;
  theirs.tag = cts.tag;
  theirs.call = cts.call;
  uint8_t hb[kFrameHeaderBytes];
  encodeFrameHeader(theirs, hb);
  FrameHeader got;
  std::string why;
  switch (decodeFrameHeader(hb, Expectation{op.seq, op.bytes, op.tag, op.call}, &got, &why)) {
    case FrameCheck::Ok: break;
    case FrameCheck::Mismatch:
      // Held back, never written: the receiver finds the mismatch in the RTS (which went out
      // first) and fails the call on both sides with its abort frame. (Failing here first would
      // tell the receiver only that this rank failed.)
      return true;
    default: failWire("a malformed CTS: " + why);
  }
  const int k = stripesFor(op.bytes);
  // Writes of at most kWriteBytes (more only where a stripe would need over a quarter of its send
  // queue), so that a live peer acknowledges something every few milliseconds: a silent send
  // queue with a probe in it then means a dead peer (armWakeup).
  const uint64_t devMax = std::min<uint64_t>(dev_->maxMsgBytes() ? dev_->maxMsgBytes() : (uint64_t(1) << 30), uint64_t(1) << 30);
  const uint64_t stripeBytes = (op.bytes + static_cast<size_t>(k) - 1) / static_cast<size_t>(k);
  const uint64_t perQueue = static_cast<uint64_t>(std::max(1, q_->sqDepth_ / 4));
  const uint64_t maxWr = std::min<uint64_t>(devMax, std::max<uint64_t>(kWriteBytes, (stripeBytes + perQueue - 1) / perQueue));
  // Room in every send queue for the whole message, or wait.
  int total = 0;
  for (int i = 0; i < k; ++i) {
    const size_t a = op.bytes * static_cast<size_t>(i) / static_cast<size_t>(k);
    const size_t b = op.bytes * static_cast<size_t>(i + 1) / static_cast<size_t>(k);
    const int n = static_cast<int>((b - a + maxWr - 1) / maxWr);
    if (sqUsed_[static_cast<size_t>(i)] + n > q_->sqDepth_) return false;
    total += n;
  }
  op.mr = dev_->cache().acquire(op.data, op.bytes, false);
  op.writesLeft = total;
  for (int i = 0; i < k; ++i) {
    const size_t a = op.bytes * static_cast<size_t>(i) / static_cast<size_t>(k);
    const size_t b = op.bytes * static_cast<size_t>(i + 1) / static_cast<size_t>(k);
    for (size_t off = a; off < b; off += maxWr) {
      const size_t n = std::min<size_t>(maxWr, b - off);
      ibv_sge sge{reinterpret_cast<uintptr_t>(op.data + off), static_cast<uint32_t>(n), op.mr.mr->lkey};
      ibv_send_wr wr{};
      wr.wr_id = wrId(kWrite, i, op.seq);
      wr.sg_list = &sge;
      wr.num_sge = 1;
      wr.send_flags = IBV_SEND_SIGNALED;
      wr.wr.rdma.remote_addr = cts.addr + off;
      wr.wr.rdma.rkey = cts.rkey;
      if (off + n == b) {
        wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
        wr.imm_data = htonl(static_cast<uint32_t>(op.seq));
      } else {
        wr.opcode = IBV_WR_RDMA_WRITE;
      }
      ibv_send_wr* bad = nullptr;
      if (int rc = ibv_post_send(q_->qps_[static_cast<size_t>(i)], &wr, &bad))
        failWire(format("cannot post an RDMA write: %s", errnoText(rc).c_str()));
      ++sqUsed_[static_cast<size_t>(i)];
    }
  }
  return true;
}

bool Connection::advanceSends() {
  bool moved = false;
  // Frames, in order, from the first send without one (every send before it, popped or not,
  // has its frame out: a send is done only after its frame).
  for (SendOp* next; nextFrameSeq_ < sendSeq_ && (next = sendAt(nextFrameSeq_)) != nullptr;) {
    SendOp& op = *next;
    FrameHeader h;
    h.seq = op.seq;
    h.length = op.bytes;
    h.tag = op.tag;
    h.call = op.call;
    const bool eager = op.bytes <= kEagerBytes;
    if (!postFrame(eager ? Kind::Eager : Kind::Rts, h, op.data, eager ? op.bytes : 0)) break;
    op.headerSent = true;
    ++nextFrameSeq_;
    moved = true;
    if (eager) {
      op.done = true;
      done_.push_back(op.cookie);
      --outstanding_;
    }
  }
  // CTSes, in order: each names a message already posted here, or a later one.
  while (!cts_.empty()) {
    const Cts c = cts_.front();
    if (c.seq >= sendSeq_) break;
    SendOp* op = sendAt(c.seq);
    if (!op || op->ctsSeen || op->bytes <= kEagerBytes) {
      // For a message sent eagerly (or gone): the receiver expects another length, and finds
      // the mismatch in the eager frame.
      cts_.pop_front();
      continue;
    }
    // Its RTS first: the receive completes on the RTS and the data, and the frames after it
    // must not overtake it.
    if (!op->headerSent || !startWrites(*op, c)) break;
    op->ctsSeen = true;
    cts_.pop_front();
    moved = true;
  }
  while (!sends_.empty() && sends_.front().done) {
    dev_->cache().release(sends_.front().mr);
    sends_.pop_front();
  }
  return moved;
}

void Connection::completeRecv(RecvOp& r) {
  r.done = true;
  done_.push_back(r.cookie);
  --outstanding_;
  if (r.large) {
    --ctsOpen_;
    dev_->cache().release(r.mr);
    r.mr = MrCache::Handle{};
  }
}

bool Connection::advanceRecvs() {
  bool moved = false;
  // Frames that came, matched in order against the receives.
  while (!arrived_.empty() && nextHeaderSeq_ < recvSeq_) {
    RecvOp* r = recvAt(nextHeaderSeq_);
    const int slot = arrived_.front();
    const uint8_t* p = recvSlab_.data() + static_cast<size_t>(slot) * kSlotBytes;
    FrameHeader h;
    std::string why;
    switch (decodeFrameHeader(p, Expectation{r->seq, r->bytes, r->tag, r->call}, &h, &why)) {
      case FrameCheck::Ok: break;
      case FrameCheck::Mismatch: fail(Errc::InvalidUsage, "%s: %s", peer_.c_str(), why.c_str());
      default: failWire(why);
    }
    arrived_.pop_front();
    ++nextHeaderSeq_;
    moved = true;
    if (!r->large) {
      if (r->bytes) memcpy(r->data, p + kFrameBytes, r->bytes);
      postRecvSlot(slot);
      ++reposted_;
      completeRecv(*r);
    } else {
      postRecvSlot(slot);
      ++reposted_;
      r->header = true;
      if (r->stripesLeft == 0 && r->ctsSent) completeRecv(*r);
    }
  }
  // CTSes for the large receives posted, in order, as far as the open count allows.
  while (nextCtsSeq_ < recvSeq_) {
    RecvOp* r = recvAt(nextCtsSeq_);
    if (!r->large) {
      ++nextCtsSeq_;
      continue;
    }
    if (ctsOpen_ >= kMaxCts || credits() <= 0 || freeSendSlots_.empty() || sqUsed_[0] >= q_->sqDepth_) break;
    r->mr = dev_->cache().acquire(r->data, r->bytes, true);
    FrameHeader h;
    h.seq = r->seq;
    h.length = r->bytes;
    h.tag = r->tag;
    h.call = r->call;
    if (!postFrame(Kind::Cts, h, nullptr, 0, reinterpret_cast<uintptr_t>(r->data), r->mr.mr->rkey)) {
      dev_->cache().release(r->mr);
      r->mr = MrCache::Handle{};
      break;
    }
    r->ctsSent = true;
    r->stripesLeft = stripesFor(r->bytes);
    ++ctsOpen_;
    ++nextCtsSeq_;
    moved = true;
    if (r->header && r->stripesLeft == 0) completeRecv(*r);
  }
  // Slots owed to the peer: with any frame going out they travel anyway; else a credit frame
  // when enough are owed or the peer may be running short.
  if (reposted_ - reported_ >= static_cast<uint32_t>(kCreditBatch)) {  // below the reserve: never starves it
    FrameHeader h;
    if (postFrame(Kind::Credit, h, nullptr, 0)) moved = true;
  }
  while (!recvs_.empty() && recvs_.front().done) recvs_.pop_front();
  return moved;
}

void Connection::onFrame(int slot, uint32_t bytes) {
  const uint8_t* p = recvSlab_.data() + static_cast<size_t>(slot) * kSlotBytes;
  if (bytes < kFrameBytes) failWire(format("a frame of %u bytes (at least %zu expected)", bytes, kFrameBytes));
  if (get<uint32_t>(p) != kFrameMagic) failWire(format("bad frame magic 0x%08x (not a Hora peer)", get<uint32_t>(p)));
  const uint32_t credits = get<uint32_t>(p + kExtCredits);
  if (newer(credits, peerReposted_)) {
    if (static_cast<int>(credits - peerReposted_) > kRecvSlots || newer(credits, framesSent_))
      failWire(format("a frame returns %u slots, more than this rank used", credits - peerReposted_));
    peerReposted_ = credits;
  }
  const FrameHeader h = peekFrameHeader(p);
  const uint32_t kind = get<uint32_t>(p + kExtKind);
  if (h.type == FrameType::Abort || kind == static_cast<uint32_t>(Kind::Abort)) {
    FrameHeader a;
    std::string why;
    if (decodeFrameHeader(p, Expectation{0, 0, 0}, &a, &why) != FrameCheck::Abort || kind != static_cast<uint32_t>(Kind::Abort) ||
        bytes != kFrameBytes + a.length)
      failWire(why.empty() ? "a malformed abort frame" : why);
    throw PeerFailure(peerText(p + kFrameBytes, static_cast<size_t>(a.length)), peerCode(a.tag));
  }
  switch (static_cast<Kind>(kind)) {
    case Kind::Cts: {
      // In order, for a message not yet sent or not yet written, never more than the open
      // receives the peer may have.
      if (bytes != kFrameBytes || h.length <= kEagerBytes || (ctsSeen_ && h.seq <= lastCts_) ||
          h.seq >= sendSeq_ + (uint64_t(1) << 40) || cts_.size() >= static_cast<size_t>(kMaxCts))
        failWire("a malformed CTS frame");
      ctsSeen_ = true;
      lastCts_ = h.seq;
      cts_.push_back(Cts{h.seq, h.length, h.tag, h.call, get<uint64_t>(p + kExtAddr), get<uint32_t>(p + kExtRkey)});
      postRecvSlot(slot);
      ++reposted_;
      return;
    }
    case Kind::Credit:
      if (bytes != kFrameBytes) failWire("a malformed credit frame");
      postRecvSlot(slot);
      ++reposted_;
      return;
    case Kind::Eager:
      if (h.length > kEagerBytes || bytes != kFrameBytes + h.length) failWire("a malformed eager frame");
      arrived_.push_back(slot);
      return;
    case Kind::Rts:
      if (h.length <= kEagerBytes || bytes != kFrameBytes) failWire("a malformed RTS frame");
      arrived_.push_back(slot);
      return;
    default: failWire(format("a frame of unknown kind %u", kind));
  }
}

void Connection::onData(uint32_t imm) {
  // The receive whose sequence ends in imm: one of the open rendezvous receives.
  if (recvs_.empty()) failWire("data for no receive");
  const uint64_t base = recvs_.front().seq;
  const uint64_t seq = base + static_cast<uint32_t>(imm - static_cast<uint32_t>(base));
  RecvOp* r = recvAt(seq);
  if (!r || !r->large || !r->ctsSent || r->done || r->stripesLeft <= 0)
    failWire(format("data for message %llu, which has no open receive", static_cast<unsigned long long>(seq)));
  if (--r->stripesLeft == 0 && r->header) completeRecv(*r);
}

void Connection::handle(const ibv_wc& wc) {
  const WrKind k = wrKind(wc.wr_id);
  if (wc.status != IBV_WC_SUCCESS) failCompletion(wc);
  const int qp = wrQp(wc.wr_id);
  switch (k) {
    case kRecvSlot:
      lastHeard_ = Clock::now();
      if (wc.opcode == IBV_WC_RECV_RDMA_WITH_IMM) {
        postRecvSlot(static_cast<int>(wrValue(wc.wr_id)));  // the slot is untouched
        onData(ntohl(wc.imm_data));
      } else {
        onFrame(static_cast<int>(wrValue(wc.wr_id)), wc.byte_len);
      }
      break;
    case kRecvData:
      lastHeard_ = Clock::now();
      if (wc.opcode != IBV_WC_RECV_RDMA_WITH_IMM) failWire("a send on a data queue pair");
      postRecvData(qp);
      onData(ntohl(wc.imm_data));
      break;
    case kSendSlot:
      lastAcked_ = Clock::now();
      --sqUsed_[0];
      freeSendSlots_.push_back(static_cast<int>(wrValue(wc.wr_id)));
      break;
    case kWrite: {
      lastAcked_ = Clock::now();
      --sqUsed_[static_cast<size_t>(qp)];
      SendOp* op = sendAt(wrValue(wc.wr_id));
      if (op && op->ctsSeen && --op->writesLeft == 0) {
        op->done = true;
        done_.push_back(op->cookie);
        --outstanding_;
        dev_->cache().release(op->mr);
        op->mr = MrCache::Handle{};
      }
      break;
    }
    case kProbe:
      --sqUsed_[0];
      probing_ = false;
      lastHeard_ = lastAcked_ = Clock::now();
      break;
    default: failWire("a completion of unknown origin");
  }
}

bool Connection::pollCq() {
  ibv_wc wcs[32];
  bool any = false;
  if (!stash_.empty()) {
    std::vector<ibv_wc> s;
    s.swap(stash_);
    for (const ibv_wc& wc : s) handle(wc);
    any = true;
  }
  for (;;) {
    const int n = ibv_poll_cq(q_->cq_, 32, wcs);
    if (n < 0) failWire("polling the completion queue failed");
    for (int i = 0; i < n; ++i) handle(wcs[i]);
    any |= n > 0;
    if (n < 32) break;
  }
  return any;
}

bool Connection::progress(std::vector<transport::Cookie>& completed) {
  if (closed_) fail(Errc::Remote, "connection to %s is closed: %s", peer_.c_str(), closedReason_.c_str());
  const size_t before = completed.size();
  bool moved = pollCq();
  moved |= advanceRecvs();
  moved |= advanceSends();
  completed.insert(completed.end(), done_.begin(), done_.end());
  done_.clear();
  return moved || completed.size() != before;
}

void Connection::addPollFds(std::vector<pollfd>& fds) const {
  if (closed_) return;
  fds.push_back(pollfd{q_->channel_->fd, POLLIN, 0});
}

bool Connection::armWakeup() {
  if (closed_) return true;
  if (!stash_.empty() || !done_.empty()) return false;
  // Waiting and nothing heard for a while: make sure the peer is still there.
  const Clock::time_point now = Clock::now();
  // A probe that neither completes nor fails while nothing else in the send queues completes
  // either: the peer's queue pair neither answers nor is refused (a dead process's queue pair can
  // linger, unanswering, where the retry count alone would never end). Writes ahead of the probe
  // are at most a few MiB each (startWrites), so a live peer acknowledges one well within
  // kProbeDead.
  if (probing_ && now - probeSince_ >= kProbeDead && now - lastAcked_ >= kProbeDead)
    fail(Errc::Remote, "%s does not answer: an 8-byte RDMA write to it has not completed in %lld s, nor anything "
         "sent before it (its process is gone, or its device or the link between went down)", peer_.c_str(),
         static_cast<long long>(std::chrono::duration_cast<std::chrono::seconds>(now - probeSince_).count()));
  if (!probing_ && now - lastHeard_ >= kProbeAfter && sqUsed_[0] < q_->sqDepth_) {
    ibv_sge sge{reinterpret_cast<uintptr_t>(sendSlab_.data()) + static_cast<size_t>(kSendSlots) * kSlotBytes, 8,
                sendMr_->lkey};
    ibv_send_wr wr{};
    wr.wr_id = wrId(kProbe, 0, 0);
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_RDMA_WRITE;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.wr.rdma.remote_addr = end_.landingAddr;
    wr.wr.rdma.rkey = end_.landingRkey;
    ibv_send_wr* bad = nullptr;
    const int rc = ibv_post_send(q_->qps_[0], &wr, &bad);
    if (rc == 0) {
      ++sqUsed_[0];
      probing_ = true;
      probeSince_ = now;
    }
    HORA_TRACE(log::kNet, "ib: nothing heard from %s for %lld ms: probe posted (%s)", peer_.c_str(),
               static_cast<long long>(std::chrono::duration_cast<milliseconds>(now - lastHeard_).count()),
               rc ? errnoText(rc).c_str() : "ok");
    lastHeard_ = now;  // the next probe a while after this one
  }
  if (ibv_req_notify_cq(q_->cq_, 0) != 0) return false;
  armed_ = true;
  ibv_wc wcs[16];
  const int n = ibv_poll_cq(q_->cq_, 16, wcs);
  if (n > 0) {
    stash_.assign(wcs, wcs + n);
    return false;
  }
  return true;
}

void Connection::disarmWakeup() {
  if (!armed_) return;
  armed_ = false;
  ibv_cq* cq = nullptr;
  void* ctx = nullptr;
  while (ibv_get_cq_event(q_->channel_, &cq, &ctx) == 0) ++unacked_;
  if (unacked_ >= 64) {
    ibv_ack_cq_events(q_->cq_, unacked_);
    unacked_ = 0;
  }
}

bool Connection::pendingFrame(uint16_t* call, uint64_t* tag) {
  if (closed_) return false;
  // Frames are taken in (an abort frame throws); every other completion waits for progress(),
  // which alone completes messages (this connection may not be busy, and then it is not called).
  ibv_wc wcs[32];
  for (int n = 32; n == 32;) {
    n = ibv_poll_cq(q_->cq_, 32, wcs);
    for (int i = 0; i < n; ++i) {
      if (wcs[i].status == IBV_WC_SUCCESS && wrKind(wcs[i].wr_id) == kRecvSlot && wcs[i].opcode == IBV_WC_RECV)
        handle(wcs[i]);
      else
        stash_.push_back(wcs[i]);
    }
  }
  if (nextHeaderSeq_ < recvSeq_ || arrived_.empty()) return false;
  const FrameHeader h = peekFrameHeader(recvSlab_.data() + static_cast<size_t>(arrived_.front()) * kSlotBytes);
  *call = h.call;
  *tag = h.tag;
  return true;
}

void Connection::shutdown(const std::string& reason, Errc code) noexcept {
  if (closed_) return;
  closed_ = true;
  closedReason_ = reason;
  const std::string text = reason.substr(0, kMaxAbortText);
  FrameHeader h;
  h.type = FrameType::Abort;
  h.length = text.size();
  h.tag = static_cast<uint64_t>(code);
  try {
    // The one slot the peer keeps for it; a send slot and room in the send queue are there
    // unless every one is taken by frames still going out.
    for (int tries = 0; tries < 2 && !abortSent_; ++tries) {
      abortSent_ = postFrame(Kind::Abort, h, text.data(), text.size(), 0, 0, true);
      if (!abortSent_) pollCq();
    }
    // Inside a failing call, give the frame until the caller's deadline to leave.
    if (abortSent_ && flushUntil_ != Clock::time_point{}) {
      // Through the one wait: it backs off, and throws (caught below) at the caller's deadline.
      const auto left = std::max(milliseconds(0), std::chrono::duration_cast<milliseconds>(flushUntil_ - Clock::now()));
      Waiter w(left, nullptr, [] { return std::string("the abort frame to leave"); });
      while (sqUsed_[0] > 0 && freeSendSlots_.size() < static_cast<size_t>(kSendSlots)) {
        ibv_wc wc;
        const int n = ibv_poll_cq(q_->cq_, 1, &wc);
        if (n < 0 || (n == 1 && wc.status != IBV_WC_SUCCESS)) break;
        if (n == 1 && wrKind(wc.wr_id) == kSendSlot) {
          --sqUsed_[0];
          freeSendSlots_.push_back(static_cast<int>(wrValue(wc.wr_id)));
        }
        if (n == 0) w.idle();  // never progressed(): the deadline stays the caller's
      }
    }
    // Inside a failing call the abort frame has had its chance: the queue pairs go to the error
    // state, so that nothing more is written into this rank's buffers or read from them once the
    // call returns. (After horaCommAbort, which never waits, the registrations go instead, below.)
    if (flushUntil_ != Clock::time_point{})
      for (ibv_qp* qp : q_->qps_) {
        ibv_qp_attr a{};
        a.qp_state = IBV_QPS_ERR;
        ibv_modify_qp(qp, &a, IBV_QP_STATE);
      }
  } catch (...) {
  }
  // Receives whose CTS went out: the peer may still write into their buffers, which belong to
  // the caller again once this call returns. Their registrations go now (a later write fails
  // at the peer with a remote access error).
  for (RecvOp& r : recvs_)
    if (r.mr.mr) {
      dev_->cache().discard(r.mr);
      r.mr = MrCache::Handle{};
    }
  for (SendOp& s : sends_) {
    dev_->cache().release(s.mr);
    s.mr = MrCache::Handle{};
  }
  sends_.clear();
  recvs_.clear();
  done_.clear();
  arrived_.clear();
  cts_.clear();
  outstanding_ = 0;
}

}  // namespace hora::ib

namespace hora::ib {

// A registration from the device's cache, held (and so kept in the cache) until the returned
// object goes; the messages that later use the buffer find it there.
std::shared_ptr<void> Connection::registerMemory(const void* p, size_t bytes) {
  // Without a cache (no ODP and the memory hooks inactive: mrcache.h) each message registers its
  // own buffer: a registration held here would pin memory no message uses.
  if (!p || bytes == 0 || !dev_->cache().stats().caching) return nullptr;
  std::shared_ptr<Device> dev = dev_;
  auto* h = new MrCache::Handle(dev->cache().acquire(p, bytes, true));
  return std::shared_ptr<void>(h, [dev](void* x) {
    auto* handle = static_cast<MrCache::Handle*>(x);
    dev->cache().release(*handle);
    delete handle;
  });
}

}  // namespace hora::ib
