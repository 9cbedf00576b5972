#include "comm/stream.h"

#include <algorithm>
#include <unordered_set>

#include "base/log.h"
#include "comm/device.h"

namespace hora {

namespace {
// The live streams: a horaStream_t is checked against it, so that a stale or foreign pointer
// (a CUDA stream, say) is an error rather than a crash.
std::mutex gRegistryMu;
std::unordered_set<const void*>& registry() {
  static auto* live = new std::unordered_set<const void*>();  // never destroyed: threads may outlive exit
  return *live;
}

// Adds delta to the stream work of each communicator of the calls (once each).
void countWork(const Calls& calls, int delta) {
  std::vector<horaComm*> seen;
  for (const auto& call : calls) {
    horaComm* c = call.first;
    if (std::find(seen.begin(), seen.end(), c) != seen.end()) continue;
    seen.push_back(c);
    // Done (delta < 0): the last touch of c by the stream's thread; at 0, c may be freed.
    std::lock_guard<std::mutex> lock(c->streamMu);
    c->streamWork += delta;
    if (delta < 0) c->streamIdle.notify_all();
  }
}
}  // namespace

HostStream::HostStream(bool registered) {
  thread_ = std::thread([this] { loop(); });
  if (!registered) return;
  std::lock_guard<std::mutex> lock(gRegistryMu);
  registry().insert(this);
}

HostStream::~HostStream() {
  {
    std::unique_lock<std::mutex> lock(mu_);
    idle_.wait(lock, [this] { return queue_.empty() && !running_; });
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

HostStream* HostStream::find(const void* handle) {
  std::lock_guard<std::mutex> lock(gRegistryMu);
  return registry().count(handle) ? static_cast<HostStream*>(const_cast<void*>(handle)) : nullptr;
}

HostStream* HostStream::fromHandle(const void* handle) {
  std::lock_guard<std::mutex> lock(gRegistryMu);
  if (!registry().count(handle))
    fail(Errc::InvalidArgument, "stream %p is not a live host stream from horaStreamCreate (nor a CUDA stream; "
         "NULL means synchronous)", handle);
  return static_cast<HostStream*>(const_cast<void*>(handle));
}

void HostStream::unregister() {
  std::lock_guard<std::mutex> lock(gRegistryMu);
  registry().erase(this);
}

void HostStream::enqueue(const char* fn, Calls calls) { enqueue(fn, std::move(calls), nullptr); }

void HostStream::enqueue(const char* fn, Calls calls, std::function<void()> run) {
  countWork(calls, +1);
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(Work{fn, std::move(calls), std::move(run)});
  }
  wake_.notify_one();
}

void HostStream::loop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    wake_.wait(lock, [this] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stop_, and nothing left
    Work w = std::move(queue_.front());
    queue_.pop_front();
    running_ = true;
    lock.unlock();
    Errc code = Errc::Success;
    std::string text;
    try {
      if (w.run) {
        w.run();  // it looks at the abort flag itself, and always lets its streams go on
      } else {
        for (const auto& call : w.calls)
          if (call.first->aborting.load()) fail(Errc::InvalidUsage, "the communicator was aborted");
        device::runSync(w.calls);
      }
    } catch (const Error& e) {
      code = e.code();
      text = std::string(w.fn) + " (on a stream): " + e.what();
    } catch (const std::bad_alloc&) {
      code = Errc::System;
      text = std::string(w.fn) + " (on a stream): out of memory";
    } catch (const std::exception& e) {
      code = Errc::Internal;
      text = std::string(w.fn) + " (on a stream): internal error: " + e.what();
    }
    if (code != Errc::Success) {
      HORA_INFO(log::kColl, "%s", text.c_str());
      for (const auto& call : w.calls) call.first->setLastError(text);
    }
    countWork(w.calls, -1);
    lock.lock();
    running_ = false;
    if (code != Errc::Success && errorCode_ == Errc::Success) {
      errorCode_ = code;
      errorText_ = text;
    }
    if (queue_.empty()) idle_.notify_all();
  }
}

void HostStream::takeError() {
  if (errorCode_ == Errc::Success) return;
  Error e(errorCode_, errorText_);
  errorCode_ = Errc::Success;
  errorText_.clear();
  throw e;
}

void HostStream::synchronize() {
  std::unique_lock<std::mutex> lock(mu_);
  idle_.wait(lock, [this] { return queue_.empty() && !running_; });
  takeError();
}

bool HostStream::query() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!queue_.empty() || running_) return false;
  takeError();
  return true;
}

void awaitStreamWork(horaComm* c) {
  if (c->streamWork.load() == 0) return;
  std::unique_lock<std::mutex> lock(c->streamMu);
  c->streamIdle.wait(lock, [c] { return c->streamWork.load() == 0; });
}

}  // namespace hora
