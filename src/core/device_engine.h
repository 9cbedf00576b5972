// The compute engine of device memory (compute.h): each action of a program a CUDA kernel
// (kernels/cuda) or a copy, queued on the engine's own stream and finished when the event
// recorded after it is; actions complete in the order they were posted (one stream). The
// CUDA IPC stage's programs run their reductions here, straight out of the peers' mapped
// device memory.
#pragma once
#include <deque>
#include <mutex>
#include <vector>

#include "core/compute.h"

namespace hora::core {

class DeviceEngine final : public ComputeEngine {
 public:
  explicit DeviceEngine(int device);  // throws Errc::Cuda where CUDA is unusable
  ~DeviceEngine() override;
  DeviceEngine(const DeviceEngine&) = delete;
  DeviceEngine& operator=(const DeviceEngine&) = delete;
  void post(const Action& a, const Program& p, transport::Cookie cookie) override;
  bool progress(std::vector<transport::Cookie>& completed) override;
  bool busy() const override { return !inFlight_.empty(); }
  // Forgets what a run that ended early left (after the stream has finished it).
  void reset() override;
  // Makes events until `events` actions can be in flight at once without making one in post():
  // an event made in a worker that a stream waits for may wait for a lock that a thread blocked
  // on that stream holds, so the caller's thread makes them first (beside a worker's run).
  void reserve(size_t events);
  void* stream() const { return stream_; }
  int device() const { return device_; }

 private:
  struct InFlight {
    void* event;
    transport::Cookie cookie;
  };
  static constexpr int kEvents = 64;  // made up front; more only if that many are ever in flight
  int device_;
  void* stream_ = nullptr;
  std::mutex eventsMu_;  // freeEvents_: reserve() runs in a caller's thread beside a worker's run
  std::deque<InFlight> inFlight_;
  std::vector<void*> freeEvents_;
  size_t made_ = 0;  // events made (free or in flight)
};

}  // namespace hora::core
