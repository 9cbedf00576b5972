#include "core/device_engine.h"

#include "gpu/cuda.h"

namespace hora::core {

DeviceEngine::DeviceEngine(int device) : device_(device) {
  cuda::setDevice(device);
  stream_ = cuda::streamCreate();
  // Made here, in the caller's thread: an event made later, in a worker that a stream waits for,
  // could wait for a driver lock that a thread blocked on that stream holds.
  for (int i = 0; i < kEvents; ++i) freeEvents_.push_back(cuda::eventCreate());
  made_ = kEvents;
}

DeviceEngine::~DeviceEngine() {
  cuda::streamSyncQuiet(stream_);
  for (const InFlight& f : inFlight_) cuda::eventDestroy(f.event);
  for (void* e : freeEvents_) cuda::eventDestroy(e);
  cuda::streamDestroy(stream_);
}

void DeviceEngine::reserve(size_t events) {
  std::lock_guard<std::mutex> lock(eventsMu_);
  while (made_ < events) {
    freeEvents_.push_back(cuda::eventCreate());
    ++made_;
  }
}

void DeviceEngine::post(const Action& a, const Program& p, transport::Cookie cookie) {
  if (a.active && a.count) {
    const kernels::ReduceSpec& s = a.spec;
    void* dsts[2] = {a.dst, a.dst2};
    const void* pair[2] = {a.src0, a.src1};
    const void* const* srcs = a.nsrcList ? p.srcLists.data() + a.srcList : pair;
    const int nsrc = a.nsrcList ? static_cast<int>(a.nsrcList) : a.src1 ? 2 : 1;
    if (!a.nsrcList && !a.src1 && !s.premulFirst && !s.divide) {
      // A copy, to one place or two, bit for bit (see runOnCpu).
      const size_t bytes = a.count * dataTypeSize(s.dtype);
      if (a.dst != a.src0) cuda::copyAsync(a.dst, a.src0, bytes, stream_);
      if (a.dst2 && a.dst2 != a.src0) cuda::copyAsync(a.dst2, a.src0, bytes, stream_);
    } else {
      cuda::reduceAsync(dsts, a.dst2 ? 2 : 1, srcs, nsrc, a.count, s, stream_);
    }
  }
  void* ev;
  {
    std::lock_guard<std::mutex> lock(eventsMu_);
    if (freeEvents_.empty()) {
      ev = cuda::eventCreate();
      ++made_;
    } else {
      ev = freeEvents_.back();
      freeEvents_.pop_back();
    }
  }
  cuda::eventRecord(ev, stream_);
  inFlight_.push_back(InFlight{ev, cookie});
}

bool DeviceEngine::progress(std::vector<transport::Cookie>& completed) {
  bool any = false;
  while (!inFlight_.empty() && cuda::eventDone(inFlight_.front().event)) {
    completed.push_back(inFlight_.front().cookie);
    std::lock_guard<std::mutex> lock(eventsMu_);
    freeEvents_.push_back(inFlight_.front().event);
    inFlight_.pop_front();
    any = true;
  }
  return any;
}

void DeviceEngine::reset() {
  cuda::streamSyncQuiet(stream_);
  std::lock_guard<std::mutex> lock(eventsMu_);
  for (const InFlight& f : inFlight_) freeEvents_.push_back(f.event);
  inFlight_.clear();
}

}  // namespace hora::core
