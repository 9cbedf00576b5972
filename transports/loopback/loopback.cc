#include "transports/loopback/loopback.h"

#include <cstring>

#include "base/error.h"

namespace hora::loopback {

void Connection::postSend(const void* data, size_t bytes, uint64_t tag, transport::Cookie cookie) {
  sends_.push(Msg{const_cast<void*>(data), bytes, tag, cookie});
}

void Connection::postRecv(void* data, size_t bytes, uint64_t tag, transport::Cookie cookie) {
  recvs_.push(Msg{data, bytes, tag, cookie});
}

bool Connection::progress(std::vector<transport::Cookie>& completed) {
  bool moved = false;
  while (!sends_.empty() && !recvs_.empty()) {
    Msg s = sends_.front(), r = recvs_.front();
    if (s.tag != r.tag)
      fail(Errc::InvalidUsage, "mismatched calls: a send to self in %s meets a receive from self in %s",
           transport::describeTag(s.tag).c_str(), transport::describeTag(r.tag).c_str());
    if (s.bytes != r.bytes)
      fail(Errc::InvalidUsage,
           "a send to self of %zu bytes meets a receive from self of %zu bytes (mismatched counts or datatypes?)",
           s.bytes, r.bytes);
    if (s.bytes && s.data != r.data) memmove(r.data, s.data, s.bytes);
    completed.push_back(s.cookie);
    completed.push_back(r.cookie);
    sends_.pop();
    recvs_.pop();
    moved = true;
  }
  return moved;
}

}  // namespace hora::loopback

// The registration: always on, and the only transport from a rank to itself.
#include "transports/registry.h"

namespace hora::loopback {

namespace {
class LoopbackTransport final : public transport::Transport {
 public:
  std::string field() override { return "self"; }
  int canConnect(const transport::PeerView& self, const transport::PeerView& peer) const override {
    return self.rank == peer.rank ? 1 : 0;
  }
  std::vector<std::unique_ptr<transport::Connection>> connect(const transport::PeerView&,
                                                             const std::vector<transport::PeerView>& peers,
                                                             transport::ConnectContext&) override {
    std::vector<std::unique_ptr<transport::Connection>> out;
    for (const transport::PeerView& p : peers) out.push_back(std::make_unique<Connection>(p.name));
    return out;
  }
};
}  // namespace

transport::Registration registration() {
  return {"loopback", "a rank's messages to itself", false,
          [](const transport::Settings&) -> std::unique_ptr<transport::Transport> {
            return std::make_unique<LoopbackTransport>();
          },
          0.1, 20};
}

}  // namespace hora::loopback
