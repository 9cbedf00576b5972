// The emulated device of gpu/cuda.h (HORA_CUDA=emulate): the library's device paths (bouncing,
// stream order, the CUDA IPC stage, their failures) run for real on a machine without a GPU.
//
//   - one device, 0. Its memory is shared host memory (a memfd per allocation), so that an IPC
//     handle (the owner's pid and descriptor) opens in another process through /proc, as CUDA IPC
//     opens device memory; pointers into it, and into mappings of it, are device pointers;
//   - a stream is a thread that runs its work in order, each piece a little late (kLag), so that
//     work the library forgets to wait for is still undone when it looks; the legacy default
//     stream (null) is one such stream for every thread of the process, as on a GPU (a kernel on
//     it that waits for another thread's next piece on it waits for ever), and a copy on it from
//     pinned memory is as late as any (a program that refills the memory before it has run
//     copies the new contents, as on a GPU); a copy to or from pageable memory is done when the
//     call returns, after the stream's earlier work;
//   - kernels are the CPU kernels, run by the stream.
// Nothing here is used unless HORA_CUDA=emulate; the tests use it (tests/test_device.cc).
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <shared_mutex>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "gpu/cuda_backend.h"
#include "gpu/protocol_host.h"
#include "base/error.h"

namespace hora::cuda {

namespace {

constexpr std::chrono::microseconds kLag{200};
constexpr uint32_t kHandleMagic = 0x554d4548;  // "HEMU"

struct IpcBytes {
  uint32_t magic;
  int32_t pid, fd;
  uint64_t bytes;
};

class EmuStream {
 public:
  EmuStream() : thread_([this] { loop(); }) {}
  ~EmuStream() {
    {
      std::unique_lock<std::mutex> lock(mu_);
      idle_.wait(lock, [this] { return q_.empty() && !running_; });
      stop_ = true;
    }
    wake_.notify_all();
    thread_.join();
  }
  void push(std::function<void()> fn) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (capture_) {  // recorded into the graph being captured, not run
        capture_->push_back(std::move(fn));
        return;
      }
      q_.push_back(std::move(fn));
    }
    wake_.notify_one();
  }
  // A capture (CUDA graphs): what is pushed until end() is recorded instead of run.
  void begin() {
    std::lock_guard<std::mutex> lock(mu_);
    if (capture_) fail(Errc::Cuda, "cudaStreamBeginCapture: the emulated stream is already capturing");
    capture_ = std::make_unique<std::vector<std::function<void()>>>();
  }
  std::unique_ptr<std::vector<std::function<void()>>> end() {
    std::lock_guard<std::mutex> lock(mu_);
    if (!capture_) fail(Errc::Cuda, "cudaStreamEndCapture: the emulated stream is not capturing");
    return std::move(capture_);
  }
  bool capturing() {
    std::lock_guard<std::mutex> lock(mu_);
    return capture_ != nullptr;
  }
  void sync() {
    std::unique_lock<std::mutex> lock(mu_);
    idle_.wait(lock, [this] { return q_.empty() && !running_; });
  }
  bool done() {
    std::lock_guard<std::mutex> lock(mu_);
    return q_.empty() && !running_;
  }

 private:
  void loop() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      wake_.wait(lock, [this] { return stop_ || !q_.empty(); });
      if (q_.empty()) return;
      std::function<void()> fn = std::move(q_.front());
      q_.pop_front();
      running_ = true;
      lock.unlock();
      std::this_thread::sleep_for(kLag);
      fn();
      lock.lock();
      running_ = false;
      if (q_.empty()) idle_.notify_all();
    }
  }
  std::mutex mu_;
  std::condition_variable wake_, idle_;
  std::deque<std::function<void()>> q_;
  bool running_ = false, stop_ = false;
  std::unique_ptr<std::vector<std::function<void()>>> capture_;
  std::thread thread_;
};

// Freed when destroyed and no stream's queued record or wait still refers to it (CUDA lets a
// program destroy an event that queued work still uses).
struct EmuEvent {
  std::atomic<uint64_t> recorded{0}, reached{0};
  std::atomic<int> refs{1};
  EmuEvent* hold() {
    refs.fetch_add(1);
    return this;
  }
  void release() {
    if (refs.fetch_sub(1) == 1) delete this;
  }
};

class Emulated final : public Backend {
 public:
  int deviceOf(const void* p) override {
    std::lock_guard<std::mutex> lock(mu_);
    const auto at = reinterpret_cast<uintptr_t>(p);
    auto it = mem_.upper_bound(at);
    if (it == mem_.begin()) return -1;
    --it;
    return at < it->first + it->second.bytes ? 0 : -1;
  }
  bool isStream(const void* s) override {
    std::lock_guard<std::mutex> lock(streamsMu_);
    return streams_.count(s) != 0;
  }
  int currentDevice() override { return 0; }
  // Each process's own device (HORA_CUDA=emulate-shared makes it one, gpu/cuda.cc).
  std::string deviceUuid(int) override { return format("656d756c61746564%016llx", static_cast<unsigned long long>(getpid())); }
  void setDevice(int dev) override {
    if (dev != 0) fail(Errc::Cuda, "cudaSetDevice failed: the emulated machine has one device, 0 (not %d)", dev);
  }
  void* hostAlloc(size_t bytes) override {
    std::unique_lock<std::shared_mutex> driver(driver_);
    void* p = calloc(1, bytes ? bytes : 1);
    if (!p) fail(Errc::System, "out of host memory (%zu bytes)", bytes);
    std::lock_guard<std::mutex> lock(mu_);
    pinned_[reinterpret_cast<uintptr_t>(p)] = bytes ? bytes : 1;
    return p;
  }
  // As cudaFreeHost and cudaFree may: wait for every stream's work first (a free on a thread that
  // a stream waits for then hangs here as it would on a GPU).
  void hostFree(void* p) override {
    idleAll();
    {
      std::lock_guard<std::mutex> lock(mu_);
      pinned_.erase(reinterpret_cast<uintptr_t>(p));
    }
    free(p);
  }
  void* deviceAlloc(size_t bytes) override {
    bytes = bytes ? bytes : 1;
    const int fd = memfd_create("hora-emulated-device", MFD_CLOEXEC);
    if (fd < 0 || ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
      const int err = errno;
      if (fd >= 0) close(fd);
      fail(Errc::Cuda, "cudaMalloc failed (emulated): %s", errnoText(err).c_str());
    }
    return add(fd, bytes, true);
  }
  void deviceFree(void* p) override {
    idleAll();
    drop(p);
  }
  // A copy from or to pageable host memory returns only once it is done, so after the stream's
  // earlier work, and (as in the driver) holds the driver's lock meanwhile: a thread that makes
  // or destroys an event (or allocates) waits for it, so a worker that a stream waits for must
  // not, while such a copy may be queued behind that wait.
  void copyAsync(void* dst, const void* src, size_t bytes, void* stream) override {
    if (pageable(dst) || pageable(src)) {
      std::shared_lock<std::shared_mutex> driver(driver_);
      this->stream(stream).sync();
      memmove(dst, src, bytes);
      return;
    }
    run(stream, [dst, src, bytes] { memmove(dst, src, bytes); });
  }
  void* streamCreate() override {
    auto* s = new EmuStream();
    std::lock_guard<std::mutex> lock(streamsMu_);
    streams_.insert(s);
    return s;
  }
  void streamDestroy(void* s) override {
    {
      std::lock_guard<std::mutex> lock(streamsMu_);
      streams_.erase(s);
    }
    std::unique_lock<std::shared_mutex> life(lives_);  // (not while deviceSync waits for it)
    delete static_cast<EmuStream*>(s);  // (after its work, as cudaStreamDestroy lets it finish)
  }
  void streamSync(void* s) override { stream(s).sync(); }
  void streamSyncQuiet(void* s) override { streamSync(s); }
  // Every stream's work done, the legacy stream's too (a kernel that spins for work queued
  // after this wait spins for ever, as on a GPU).
  void deviceSync() override { idleAll(); }
  bool streamDone(void* s) override { return stream(s).done(); }
  void* eventCreate() override {
    std::unique_lock<std::shared_mutex> driver(driver_);
    return new EmuEvent();
  }
  void eventDestroy(void* e) override {
    std::unique_lock<std::shared_mutex> driver(driver_);
    static_cast<EmuEvent*>(e)->release();
  }
  void eventRecord(void* e, void* s) override {
    EmuEvent* ev = static_cast<EmuEvent*>(e)->hold();
    const uint64_t gen = ++ev->recorded;
    run(s, [ev, gen] {  // the latest record wins, whichever stream reaches its record last
      uint64_t at = ev->reached.load();
      while (at < gen && !ev->reached.compare_exchange_weak(at, gen)) {
      }
      ev->release();
    });
  }
  bool eventDone(void* e) override {
    EmuEvent* ev = static_cast<EmuEvent*>(e);
    return ev->reached.load() >= ev->recorded.load();
  }
  int streamDevice(void* s) override {
    stream(s);
    return 0;
  }
  void streamWaitEvent(void* s, void* e) override {
    EmuEvent* ev = static_cast<EmuEvent*>(e)->hold();
    const uint64_t gen = ev->recorded.load();
    run(s, [ev, gen] {
      while (ev->reached.load() < gen) std::this_thread::sleep_for(std::chrono::microseconds(20));
      ev->release();
    });
  }
  void streamWaitFlag(void* s, const volatile uint32_t* flag, uint32_t value, bool) override {
    run(s, [flag, value] {
      while (static_cast<int32_t>(__atomic_load_n(flag, __ATOMIC_ACQUIRE) - value) < 0)
        std::this_thread::sleep_for(std::chrono::microseconds(20));
    });
  }
  // As CUDA's lazy loading: a kernel (one per element type and operation, as kernels/cuda
  // instantiates them) not loaded before waits, at its first launch, for every stream's work, so
  // a launch from a thread that a stream waits for hangs, as on a GPU.
  void loadKernels() override { loaded_.store(~uint64_t{0}); }
  void collectiveAsync(const gpu::Desc& d, void* s) override {
    run(s, [d] { gpu::runOnHost(d); });
  }
  void batchAsync(const gpu::Batch& t, void* s) override {
    auto held = std::make_shared<gpu::Batch>(t);
    run(s, [held] { gpu::runOnHost(*held); });
  }
  void* mappedPointer(void* host) override { return host; }
  bool isCapturing(void* s) override { return stream(s).capturing(); }
  void streamBeginCapture(void* s) override { stream(s).begin(); }
  // A graph is the recorded work, replayed in order (what it captured by value, as a CUDA graph
  // keeps a kernel's arguments).
  void* streamEndCapture(void* s) override { return stream(s).end().release(); }
  void graphLaunch(void* graph, void* s) override {
    for (const std::function<void()>& fn : *static_cast<std::vector<std::function<void()>>*>(graph)) run(s, fn);
  }
  void graphDestroy(void* graph) override { delete static_cast<std::vector<std::function<void()>>*>(graph); }
  void reduceAsync(void* const* dsts, int ndst, const void* const* srcs, int nsrc, size_t count,
                   const kernels::ReduceSpec& spec, void* s) override {
    const int op = static_cast<int>(spec.op);
    const uint64_t bit = uint64_t{1} << (static_cast<int>(spec.dtype) * 4 + (op >= 4 ? 0 : op));
    if (!(loaded_.load() & bit)) {
      idleAll();
      loaded_.fetch_or(bit);
    }
    std::vector<void*> d(dsts, dsts + ndst);
    std::vector<const void*> in(srcs, srcs + nsrc);
    run(s, [d, in, count, spec] {
      kernels::reduce(d.data(), static_cast<int>(d.size()), in.data(), static_cast<int>(in.size()), count, spec);
    });
  }
  IpcHandle ipcHandle(void* p) override {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = mem_.find(reinterpret_cast<uintptr_t>(p));
    if (it == mem_.end() || !it->second.owned)
      fail(Errc::Cuda, "cudaIpcGetMemHandle failed (emulated): %p is not the start of an allocation", p);
    IpcBytes b{kHandleMagic, static_cast<int32_t>(getpid()), it->second.fd, it->second.bytes};
    IpcHandle h{};
    memcpy(h.bytes, &b, sizeof b);
    return h;
  }
  void* ipcOpen(const IpcHandle& h) override {
    IpcBytes b;
    memcpy(&b, h.bytes, sizeof b);
    if (b.magic != kHandleMagic) fail(Errc::Cuda, "cudaIpcOpenMemHandle failed (emulated): not a handle");
    if (b.pid == static_cast<int32_t>(getpid()))
      fail(Errc::Cuda, "cudaIpcOpenMemHandle failed (emulated): a handle of this very process");
    const std::string path = format("/proc/%d/fd/%d", b.pid, b.fd);
    const int fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
    if (fd < 0) fail(Errc::Cuda, "cudaIpcOpenMemHandle failed (emulated): %s: %s", path.c_str(), errnoText(errno).c_str());
    return add(fd, b.bytes, false);
  }
  void ipcClose(void* p) override { drop(p); }
  bool canAccessPeer(int, int) override { return true; }
  void enablePeer(int) override {}

 private:
  struct Mem {
    size_t bytes;
    int fd;
    bool owned;  // allocated here (else a mapping of a peer's)
  };
  // Waits for every stream's work, the legacy stream's too. The streams are waited for without
  // holding streamsMu_: on a GPU, other threads go on queueing work meanwhile (a rank whose
  // kernel another rank's waits for may be queueing it right now); a stream is not destroyed
  // while this waits for it (lives_).
  void idleAll() {
    legacy_.sync();
    std::shared_lock<std::shared_mutex> life(lives_);
    std::vector<const void*> now;
    {
      std::lock_guard<std::mutex> lock(streamsMu_);
      now.assign(streams_.begin(), streams_.end());
    }
    for (const void* s : now) static_cast<EmuStream*>(const_cast<void*>(s))->sync();
  }
  // A stream by its handle; null: the legacy default stream.
  EmuStream& stream(void* s) {
    if (!s) return legacy_;
    if (!isStream(s)) fail(Errc::Cuda, "invalid resource handle (emulated stream %p)", s);
    return *static_cast<EmuStream*>(s);
  }
  void run(void* s, std::function<void()> fn) { stream(s).push(std::move(fn)); }
  void* add(int fd, size_t bytes, bool owned) {
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
      const int err = errno;
      close(fd);
      fail(Errc::Cuda, "mapping emulated device memory: %s", errnoText(err).c_str());
    }
    if (!owned) {
      close(fd);
      fd = -1;
    }
    std::lock_guard<std::mutex> lock(mu_);
    mem_[reinterpret_cast<uintptr_t>(p)] = Mem{bytes, fd, owned};
    return p;
  }
  void drop(void* p) {
    Mem m;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = mem_.find(reinterpret_cast<uintptr_t>(p));
      if (it == mem_.end()) return;
      m = it->second;
      mem_.erase(it);
    }
    munmap(p, m.bytes);
    if (m.fd >= 0) close(m.fd);
  }

  std::atomic<uint64_t> loaded_{0};  // the kernels loaded (reduceAsync)
  // Host memory that is neither emulated device memory nor pinned (hostAlloc).
  bool pageable(const void* p) {
    const auto at = reinterpret_cast<uintptr_t>(p);
    std::lock_guard<std::mutex> lock(mu_);
    auto d = mem_.upper_bound(at);
    if (d != mem_.begin() && at < std::prev(d)->first + std::prev(d)->second.bytes) return false;
    auto h = pinned_.upper_bound(at);
    return h == pinned_.begin() || at >= std::prev(h)->first + std::prev(h)->second;
  }

  std::shared_mutex driver_;  // the driver's lock (see copyAsync)
  std::mutex mu_;  // mem_, pinned_
  std::map<uintptr_t, Mem> mem_;
  std::map<uintptr_t, size_t> pinned_;  // hostAlloc's blocks
  std::mutex streamsMu_;  // streams_, and their lives
  EmuStream legacy_;      // the legacy default stream: one for every thread
  std::shared_mutex lives_;  // held (shared) by deviceSync, (exclusive) by a stream's end
  std::set<const void*> streams_;
};

}  // namespace

Backend* emulatedBackend() {
  static Emulated* e = new Emulated();  // never destroyed: streams may outlive exit
  return e;
}

}  // namespace hora::cuda
