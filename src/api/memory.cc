// Memory: device allocations (horaMemAlloc), buffers registered ahead of the calls that use them
// (horaCommRegister), and windows (horaCommWindowRegister, the collective kind).
//
// A registration asks every transport of the communicator to register the buffer now: the ib
// transport puts it in its device's registration cache and holds it there until it is
// deregistered, so that a call on it never pays the registration; the other transports keep
// nothing (shared memory and TCP copy through their own buffers). Device buffers are bounced
// through host memory by every transport but CUDA IPC, so they register nothing either. The
// handle is an entry of the communicator's table: a handle that is not in it (another
// communicator's, one deregistered already, any other pointer) is an argument error, never a
// crash.
#include <cstring>

#include "api/guard.h"
#include "gpu/cuda.h"
#include "comm/config.h"
#include "comm/group.h"

using namespace hora;
using api::guard;

namespace {

struct Registration {
  void* buff = nullptr;
  size_t size = 0;
  bool window = false;
  int flags = 0;
  std::vector<std::shared_ptr<void>> holds;  // the transports' registrations
};

std::shared_ptr<Registration> registerWithTransports(horaComm* c, void* buff, size_t size) {
  auto reg = std::make_shared<Registration>();
  reg->buff = buff;
  reg->size = size;
  if (buff && size && cuda::deviceOf(buff) < 0)
    for (const auto& conn : c->conns)
      if (conn)
        if (std::shared_ptr<void> h = conn->registerMemory(buff, size)) reg->holds.push_back(std::move(h));
  return reg;
}

void* keep(horaComm* c, std::shared_ptr<Registration> reg) {
  void* handle = reg.get();
  std::lock_guard<std::mutex> lock(c->registeredMu);
  c->registered.emplace(handle, std::move(reg));
  return handle;
}

// Removes the handle's entry; throws InvalidArgument when it is none of c's, or of the other kind.
void forget(horaComm* c, const void* handle, bool window, const char* what) {
  std::shared_ptr<void> gone;  // released outside the lock
  std::lock_guard<std::mutex> lock(c->registeredMu);
  auto it = c->registered.find(handle);
  if (it == c->registered.end() || static_cast<const Registration*>(it->second.get())->window != window)
    fail(Errc::InvalidArgument, "%s %p was not registered on this communicator (or was deregistered)", what, handle);
  gone = std::move(it->second);
  c->registered.erase(it);
}

}  // namespace

HORA_API horaResult_t horaMemAlloc(void** ptr, size_t size) {
  return guard("horaMemAlloc", nullptr, [&] {
    if (!ptr) fail(Errc::InvalidArgument, "ptr is NULL");
    *ptr = nullptr;
    config();  // HORA_CUDA decides which device, if any, serves it
    if (!cuda::usable()) fail(Errc::Cuda, "no device memory to allocate: %s", cuda::unusableWhy().c_str());
    if (size == 0) return;
    *ptr = cuda::deviceAlloc(size);
  });
}

HORA_API horaResult_t horaMemFree(void* ptr) {
  return guard("horaMemFree", nullptr, [&] {
    if (!ptr) return;
    config();
    if (!cuda::usable() || cuda::deviceOf(ptr) < 0)
      fail(Errc::InvalidArgument, "%p is not device memory from horaMemAlloc", ptr);
    cuda::deviceFree(ptr);
  });
}

HORA_API horaResult_t horaCommRegister(const horaComm_t comm, void* buff, size_t size, void** handle) {
  return guard("horaCommRegister", comm, [&] {
    horaComm* c = api::checkComm(comm);
    if (!handle) fail(Errc::InvalidArgument, "handle is NULL");
    *handle = nullptr;
    if (!buff && size) fail(Errc::InvalidArgument, "buff is NULL");
    c->check();
    *handle = keep(c, registerWithTransports(c, buff, size));
  });
}

HORA_API horaResult_t horaCommDeregister(const horaComm_t comm, void* handle) {
  return guard("horaCommDeregister", comm, [&] {
    horaComm* c = api::checkCommAny(comm);
    forget(c, handle, false, "handle");
  });
}

HORA_API horaResult_t horaCommWindowRegister(horaComm_t comm, void* buff, size_t size, horaWindow_t* win,
                                             int winFlags) {
  return guard("horaCommWindowRegister", comm, [&] {
    horaComm* c = api::checkComm(comm);
    if (!win) fail(Errc::InvalidArgument, "win is NULL");
    *win = nullptr;
    if (!buff && size) fail(Errc::InvalidArgument, "buff is NULL");
    if (winFlags != HORA_WIN_DEFAULT && winFlags != HORA_WIN_COLL_SYMMETRIC)
      fail(Errc::InvalidArgument, "winFlags %d is invalid: use HORA_WIN_DEFAULT (0) or HORA_WIN_COLL_SYMMETRIC (1)",
           winFlags);
    if (group::active()) fail(Errc::InvalidUsage, "horaCommWindowRegister inside a group is not supported");
    // Collective: every rank learns every rank's size and flags, so that all of them find the
    // same mismatch, if any, and fail alike.
    struct Mine {
      uint64_t size;
      int32_t flags, pad;
    } mine{size, winFlags, 0};
    std::vector<Mine> all(static_cast<size_t>(c->self().nranks));
    coll::Args a;
    a.kind = coll::Kind::AllGather;
    a.dtype = DataType::Uint8;
    a.count = sizeof(Mine);
    a.sendbuf = &mine;
    a.recvbuf = all.data();
    group::submit(c, a);
    for (int r = 0; r < c->self().nranks; ++r) {
      const Mine& m = all[static_cast<size_t>(r)];
      if (m.flags != all[0].flags)
        fail(Errc::InvalidUsage, "the ranks register a window with different flags: rank 0 with %d, rank %d with %d",
             all[0].flags, r, m.flags);
      if (winFlags == HORA_WIN_COLL_SYMMETRIC && m.size != all[0].size)
        fail(Errc::InvalidUsage, "a symmetric window must have the same size on every rank: rank 0 registers %llu "
             "bytes, rank %d %llu", static_cast<unsigned long long>(all[0].size), r,
             static_cast<unsigned long long>(m.size));
    }
    std::shared_ptr<Registration> reg = registerWithTransports(c, buff, size);
    reg->window = true;
    reg->flags = winFlags;
    *win = static_cast<horaWindow_t>(keep(c, std::move(reg)));
  });
}

HORA_API horaResult_t horaCommWindowDeregister(horaComm_t comm, horaWindow_t win) {
  return guard("horaCommWindowDeregister", comm, [&] {
    horaComm* c = api::checkCommAny(comm);
    forget(c, win, true, "window");
  });
}
