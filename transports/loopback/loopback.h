// The connection of a rank to itself (send/recv to self inside a group): the k-th send meets
// the k-th receive and is copied across, with the same length and tag checks as a wire.
#pragma once
#include <string>

#include "base/ring.h"
#include "transports/transport.h"

namespace hora::loopback {

class Connection final : public transport::Connection {
 public:
  explicit Connection(std::string name) : name_(std::move(name)) {}
  void postSend(const void* data, size_t bytes, uint64_t tag, transport::Cookie cookie) override;
  void postRecv(void* data, size_t bytes, uint64_t tag, transport::Cookie cookie) override;
  bool progress(std::vector<transport::Cookie>& completed) override;
  bool busy() const override { return !sends_.empty() || !recvs_.empty(); }
  void addPollFds(std::vector<pollfd>&) const override {}
  void shutdown(const std::string&, Errc) noexcept override {
    sends_.clear();
    recvs_.clear();
  }
  const std::string& peerName() const override { return name_; }

 private:
  struct Msg {
    void* data;
    size_t bytes;
    uint64_t tag;
    transport::Cookie cookie;
  };
  RingQueue<Msg> sends_, recvs_;
  std::string name_;
};

}  // namespace hora::loopback
