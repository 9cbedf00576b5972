// The CUDA IPC stage: the shared stage (transports/stage.h) of the ranks of one host whose
// regions are device memory. Each member allocates its region on its GPU and the others map it
// (cudaIpcOpenMemHandle, or the pointer itself between ranks of one process); the counters, the
// call announcements, the failure records and the wake-ups are the host's shared-memory stage's,
// which it wraps, so a dead or stopped member is found exactly as there. The shared-stage
// algorithms (src/coll/stage.cc) run on it unchanged; their reductions and copies then read the
// peers' GPU memory, as kernels on a device engine (core/device_engine.h).
//
// It is made by the communicator (comm/device.cc) when a call first needs it, since mapping
// needs every member's handle: the members exchange them with a collective of their own.
#pragma once
#include <memory>

#include "transports/stage.h"

namespace hora::transport {

class CudaIpcStage final : public SharedStage {
 public:
  // host: the ranks' shared-memory stage; regions: each member's device region (this rank's own
  // and the others' mappings), regionBytes each.
  CudaIpcStage(std::shared_ptr<const SharedStage> host, std::vector<uint8_t*> regions, size_t regionBytes)
      : host_(std::move(host)) {
    mapCountersOf(*host_, std::move(regions), regionBytes);
  }
  int size() const override { return host_->size(); }
  int index() const override { return host_->index(); }
  const std::vector<int>& ranks() const override { return host_->ranks(); }
  const std::string& memberName(int member) const override { return host_->memberName(member); }
  void wakeAll() const override { host_->wakeAll(); }
  std::string arm(int only, Errc* relayed, std::vector<pollfd>& fds) const override {
    return host_->arm(only, relayed, fds);
  }
  void disarm() const override { host_->disarm(); }
  void announce(uint64_t no, uint64_t tag) const override { host_->announce(no, tag); }
  int mismatch(uint64_t no, uint64_t tag, uint64_t* theirs, int only = -1) const override {
    return host_->mismatch(no, tag, theirs, only);
  }
  bool announced(int member, uint64_t no, uint64_t* tag) const override { return host_->announced(member, no, tag); }
  uint64_t lastCall(int member) const override { return host_->lastCall(member); }
  void publishUnchecked(uint64_t from) const override { host_->publishUnchecked(from); }
  uint64_t checkedThrough(int member) const override { return host_->checkedThrough(member); }
  bool closed(int member) const override { return host_->closed(member); }
  void markFailed(const std::string& why, Errc code) const override { host_->markFailed(why, code); }

 private:
  std::shared_ptr<const SharedStage> host_;
};

}  // namespace hora::transport
