// The transport interface: how the progress engine moves bytes between this rank and one
// peer. A transport knows nothing of collectives; it carries ordered messages.
//
// Contract of a Connection (to one peer):
//   - postSend / postRecv queue a message and return at once; they never block and never
//     fail (failures surface from progress()). The buffer must stay untouched until the
//     message completes.
//   - Messages in one direction are matched in the order posted: the k-th send of one side
//     is the k-th receive of the other. Each message carries a tag; the receiver's posted
//     length and tag must equal the sender's, or progress() throws (mismatched calls across
//     ranks are caught, never misread).
//   - progress() moves whatever the wire allows now, never blocks, appends the cookies of
//     completed messages (in no particular order) and returns whether anything moved. It
//     throws hora::Error on a failure of the peer or the wire, naming the peer.
//   - addPollFds() lists what to poll() on when there is nothing to do but wait.
//   - armWakeup() is called just before the caller blocks in poll(): a transport whose peer
//     signals through memory asks to be woken; it returns false if there is work after all
//     (then the caller does not block), and may throw if the peer is gone. disarmWakeup() follows
//     the poll().
//   - postHeld() may hold a small message back, to go out with the peer's next message (one
//     write for both); releaseHeld() sends what is held. A held message keeps its place in
//     the order of messages, so the peer sees no difference but when it arrives.
//   - setCall() numbers the messages posted next; pendingFrame() peeks at a frame that no
//     receive wants yet (the executor's check for a peer in another collective, when stuck).
//   - unreadMost() bounds the small messages the peer may send ahead of this side's receives
//     (a link that holds fewer would stop the peer's sends).
//   - shutdown() is fail-stop: it tells the peer why (best effort) and closes. A failing call
//     first calls finishPartial(until): its buffers are still valid, so a message already
//     partly out can be completed, and the abort frame can follow it on the wire instead of
//     being lost behind half a message; both wait for room until `until` at most. Without
//     finishPartial (horaCommAbort), shutdown never waits.
#pragma once
#include <poll.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/error.h"

namespace hora::transport {

using Cookie = uint32_t;
// A message posted with this cookie is never reported complete (postHeld only: a message no
// one waits for, such as a call check on a link that holds it back).
inline constexpr Cookie kNoCookie = ~Cookie(0);

class Connection {
 public:
  virtual ~Connection() = default;
  virtual void postSend(const void* data, size_t bytes, uint64_t tag, Cookie cookie) = 0;
  virtual void postRecv(void* data, size_t bytes, uint64_t tag, Cookie cookie) = 0;
  // A small message (a call check's byte: comm/call_check.h) that may wait here, in its place
  // among the messages to the peer, until the next one posted goes out, until a few are held,
  // or until releaseHeld(): it completes at once (its bytes are copied), and busy() does not
  // count it until it is released. Where the transport holds nothing back: postSend.
  virtual void postHeld(const void* data, size_t bytes, uint64_t tag, Cookie cookie) {
    postSend(data, bytes, tag, cookie);
  }
  // Sends what postHeld holds back: before this rank waits (the peer may wait for it), and
  // before the connection closes. Whether anything was held (it is then busy() until out).
  virtual bool releaseHeld() { return false; }
  virtual bool holding() const { return false; }  // postHeld holds a message not released
  // Whether postHeld may hold messages back here, and so on the peer's side of this link too:
  // a rank closing the link then takes only what has come of them (the peer may be the same
  // thread's next rank to close, and release them only then).
  virtual bool holdsBack() const { return false; }
  virtual bool progress(std::vector<Cookie>& completed) = 0;
  virtual bool busy() const = 0;  // any posted message not yet complete
  virtual void addPollFds(std::vector<pollfd>& fds) const = 0;
  virtual bool armWakeup() { return true; }
  virtual void disarmWakeup() {}
  virtual void finishPartial(std::chrono::steady_clock::time_point /*until*/) noexcept {}
  // The collective call (numbered on its communicator from 1, modulo 65536; 0: none) of the
  // messages posted from now on: it travels in each frame and is checked against the receive.
  virtual void setCall(uint16_t /*call*/) {}
  // With no receive posted: whether a whole frame header waits from the peer, and its call and
  // tag (without consuming it). Throws the peer's failure if what waits is its abort frame.
  virtual bool pendingFrame(uint16_t* /*call*/, uint64_t* /*tag*/) { return false; }
  // With no receive posted: takes the frames waiting from the peer, in order, that are all
  // there and small (call checks: comm/call_check.h) and that `accept` agrees to (called with
  // each one's index from 0, call and tag, before it is taken), at most `most`, as receives of
  // them would (TCP: in one read a socket). Stops at the first it refuses, one not all there or
  // not small, or an abort frame (left for pendingFrame()). How many it took.
  using AcceptFrame = bool (*)(void* ctx, size_t i, uint16_t call, uint64_t tag);
  virtual size_t takePendingFrames(size_t /*most*/, AcceptFrame /*accept*/, void* /*ctx*/) { return 0; }
  // How many small messages (a call check's byte: comm/call_check.h) of the peer may wait here
  // unread, in batches, without ever stopping its sends: the call check's window.
  virtual size_t unreadMost() const { return 48; }
  virtual void shutdown(const std::string& reason, Errc code) noexcept = 0;
  virtual const std::string& peerName() const = 0;  // "rank 3 (host, pid 123)"
  // Registers [p, p + bytes) ahead of the messages that will use it (horaCommRegister), where
  // the transport keeps registrations: the returned object holds it until released (the
  // transport may keep it longer, in its cache). Null where the transport registers nothing.
  virtual std::shared_ptr<void> registerMemory(const void* /*p*/, size_t /*bytes*/) { return nullptr; }
};

// Describes a tag for error messages ("AllReduce(count 1024, float, sum)"); installed by the
// layer that makes tags so that transports can explain a mismatch without knowing collectives.
using TagDescriber = std::string (*)(uint64_t tag);
void setTagDescriber(TagDescriber d);
std::string describeTag(uint64_t tag);

}  // namespace hora::transport
