// Host streams: an in-order queue of calls with its own progress thread, so that a caller
// (a framework's training loop) goes on computing while collectives run.
//
// A call on a stream has its arguments checked in the caller's thread, then waits in the
// queue; the stream's thread runs the calls one after another, each as runCalls would run it
// in the caller's thread. The first error of the stream's work is kept until
// horaStreamSynchronize (or a finished horaStreamQuery) reports it; a failure of a peer also
// puts the communicator in its error state, as it would without a stream.
//
// Communicators count the stream work queued on them (horaComm::streamWork): a call without a
// stream waits for that work first (calls on one communicator keep the order they were made
// in, as with CUDA's legacy default stream), and destroy and abort wait for it to drain, so
// that a stream's thread never touches a freed communicator.
#pragma once
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "comm/comm.h"

namespace hora {

using Calls = std::vector<std::pair<horaComm*, coll::Args>>;

class HostStream {
 public:
  // registered: a user's stream, found by fromHandle; else the library's own (a communicator's
  // worker for CUDA streams, comm/device.h).
  explicit HostStream(bool registered = true);
  ~HostStream();  // drains the queue, then stops the thread
  HostStream(const HostStream&) = delete;
  HostStream& operator=(const HostStream&) = delete;

  // The stream behind a horaStream_t, or throws InvalidArgument if it is not a live one.
  static HostStream* fromHandle(const void* handle);
  static HostStream* find(const void* handle);  // null where it is not one
  // Forgets the handle (before the stream is deleted): later calls with it are errors.
  void unregister();

  // Queues calls (one call, or a group) that `fn` made; they run together, in order after
  // everything queued before.
  void enqueue(const char* fn, Calls calls);
  // Queues `run` in place of running the calls (which it runs, and which count as work on their
  // communicators meanwhile).
  void enqueue(const char* fn, Calls calls, std::function<void()> run);
  // Waits until the queue is empty, then throws the first unreported error, if any.
  void synchronize();
  // False while work is queued or running; else as synchronize().
  bool query();

 private:
  struct Work {
    const char* fn;
    Calls calls;
    std::function<void()> run;
  };
  void loop();
  void takeError();  // throws and clears the kept error; call with mu_ held

  std::mutex mu_;
  std::condition_variable wake_;  // work arrived, or stop
  std::condition_variable idle_;  // the queue ran empty
  std::deque<Work> queue_;
  bool running_ = false;
  bool stop_ = false;
  Errc errorCode_ = Errc::Success;
  std::string errorText_;
  std::thread thread_;
};

// Before a call without a stream on c: waits until c's stream work is done.
void awaitStreamWork(horaComm* c);

}  // namespace hora
