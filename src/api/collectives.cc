// The collective entry points: check every argument, then hand the call to the communicator
// (run now, or held by an open group).
#include <cstdint>

#include "api/guard.h"
#include "comm/group.h"

using namespace hora;
using api::guard;

namespace {

size_t checkedBytes(size_t count, DataType dt, size_t times) {
  size_t e = dataTypeSize(dt);
  // No object is larger than PTRDIFF_MAX bytes: a larger count cannot describe the caller's buffer.
  if (count > static_cast<size_t>(PTRDIFF_MAX) / e / times)
    fail(Errc::InvalidArgument, "count %zu overflows the address space", count);
  return count * e * times;
}

bool overlaps(const void* a, size_t an, const void* b, size_t bn) {
  auto x = reinterpret_cast<uintptr_t>(a), y = reinterpret_cast<uintptr_t>(b);
  return an && bn && x < y + bn && y < x + an;
}

void checkRoot(int root, const horaComm* c) {
  if (root < 0 || root >= c->self().nranks) fail(Errc::InvalidArgument, "root %d is out of range [0, %d)", root, c->self().nranks);
}

void needBuffer(const void* p, size_t bytes, const char* name) {
  if (!p && bytes) fail(Errc::InvalidArgument, "%s is NULL", name);
}

// Out of place, the buffers must not overlap; in place, they are the same (or, for the
// gathering calls, the rank's slice).
void checkOverlap(const void* send, size_t sn, const void* recv, size_t rn, const void* inPlaceSend) {
  if (send == inPlaceSend) return;
  if (overlaps(send, sn, recv, rn))
    fail(Errc::InvalidArgument, "sendbuff and recvbuff overlap without being in place");
}

coll::Args args(coll::Kind k, horaComm* c, const void* send, void* recv, size_t count, int t) {
  coll::Args a;
  a.kind = k;
  a.sendbuf = send;
  a.recvbuf = recv;
  a.count = count;
  a.dtype = api::checkType(t);
  (void)c;
  return a;
}

}  // namespace

HORA_API horaResult_t horaAllReduce(const void* sendbuff, void* recvbuff, size_t count, horaDataType_t datatype,
                                    horaRedOp_t op, horaComm_t comm, horaStream_t stream) {
  return guard("horaAllReduce", comm, [&] {
    horaComm* c = api::checkComm(comm);
    device::StreamRef hs = api::checkStream(stream);
    coll::Args a = args(coll::Kind::AllReduce, c, sendbuff, recvbuff, count, api::rawInt(datatype));
    c->resolveOp(api::rawInt(op), a.dtype, a);
    size_t bytes = checkedBytes(count, a.dtype, 1);
    needBuffer(sendbuff, bytes, "sendbuff");
    needBuffer(recvbuff, bytes, "recvbuff");
    checkOverlap(sendbuff, bytes, recvbuff, bytes, recvbuff);
    group::submit(c, a, hs, "horaAllReduce");
  });
}

HORA_API horaResult_t horaBroadcast(const void* sendbuff, void* recvbuff, size_t count, horaDataType_t datatype,
                                    int root, horaComm_t comm, horaStream_t stream) {
  return guard("horaBroadcast", comm, [&] {
    horaComm* c = api::checkComm(comm);
    device::StreamRef hs = api::checkStream(stream);
    coll::Args a = args(coll::Kind::Broadcast, c, sendbuff, recvbuff, count, api::rawInt(datatype));
    checkRoot(root, c);
    a.root = root;
    size_t bytes = checkedBytes(count, a.dtype, 1);
    needBuffer(recvbuff, bytes, "recvbuff");
    if (c->self().rank == root) {
      needBuffer(sendbuff, bytes, "sendbuff (on the root)");
      checkOverlap(sendbuff, bytes, recvbuff, bytes, recvbuff);
    }
    group::submit(c, a, hs, "horaBroadcast");
  });
}

HORA_API horaResult_t horaReduce(const void* sendbuff, void* recvbuff, size_t count, horaDataType_t datatype,
                                 horaRedOp_t op, int root, horaComm_t comm, horaStream_t stream) {
  return guard("horaReduce", comm, [&] {
    horaComm* c = api::checkComm(comm);
    device::StreamRef hs = api::checkStream(stream);
    coll::Args a = args(coll::Kind::Reduce, c, sendbuff, recvbuff, count, api::rawInt(datatype));
    c->resolveOp(api::rawInt(op), a.dtype, a);
    checkRoot(root, c);
    a.root = root;
    size_t bytes = checkedBytes(count, a.dtype, 1);
    needBuffer(sendbuff, bytes, "sendbuff");
    if (c->self().rank == root) {
      needBuffer(recvbuff, bytes, "recvbuff (on the root)");
      checkOverlap(sendbuff, bytes, recvbuff, bytes, recvbuff);
    }
    group::submit(c, a, hs, "horaReduce");
  });
}

HORA_API horaResult_t horaAllGather(const void* sendbuff, void* recvbuff, size_t sendcount, horaDataType_t datatype,
                                    horaComm_t comm, horaStream_t stream) {
  return guard("horaAllGather", comm, [&] {
    horaComm* c = api::checkComm(comm);
    device::StreamRef hs = api::checkStream(stream);
    coll::Args a = args(coll::Kind::AllGather, c, sendbuff, recvbuff, sendcount, api::rawInt(datatype));
    size_t bytes = checkedBytes(sendcount, a.dtype, 1);
    size_t total = checkedBytes(sendcount, a.dtype, static_cast<size_t>(c->self().nranks));
    needBuffer(sendbuff, bytes, "sendbuff");
    needBuffer(recvbuff, total, "recvbuff");
    const void* mine = recvbuff ? static_cast<uint8_t*>(recvbuff) + bytes * static_cast<size_t>(c->self().rank) : nullptr;
    checkOverlap(sendbuff, bytes, recvbuff, total, mine);
    group::submit(c, a, hs, "horaAllGather");
  });
}

HORA_API horaResult_t horaReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                                        horaDataType_t datatype, horaRedOp_t op, horaComm_t comm,
                                        horaStream_t stream) {
  return guard("horaReduceScatter", comm, [&] {
    horaComm* c = api::checkComm(comm);
    device::StreamRef hs = api::checkStream(stream);
    coll::Args a = args(coll::Kind::ReduceScatter, c, sendbuff, recvbuff, recvcount, api::rawInt(datatype));
    c->resolveOp(api::rawInt(op), a.dtype, a);
    size_t bytes = checkedBytes(recvcount, a.dtype, 1);
    size_t total = checkedBytes(recvcount, a.dtype, static_cast<size_t>(c->self().nranks));
    needBuffer(sendbuff, total, "sendbuff");
    needBuffer(recvbuff, bytes, "recvbuff");
    const void* mine = sendbuff ? static_cast<const uint8_t*>(sendbuff) + bytes * static_cast<size_t>(c->self().rank) : nullptr;
    // In place: recvbuff is this rank's slice of sendbuff.
    if (recvbuff != mine && overlaps(sendbuff, total, recvbuff, bytes))
      fail(Errc::InvalidArgument, "sendbuff and recvbuff overlap without being in place");
    group::submit(c, a, hs, "horaReduceScatter");
  });
}

HORA_API horaResult_t horaSend(const void* sendbuff, size_t count, horaDataType_t datatype, int peer,
                               horaComm_t comm, horaStream_t stream) {
  return guard("horaSend", comm, [&] {
    horaComm* c = api::checkComm(comm);
    device::StreamRef hs = api::checkStream(stream);
    coll::Args a = args(coll::Kind::Send, c, sendbuff, nullptr, count, api::rawInt(datatype));
    if (peer < 0 || peer >= c->self().nranks) fail(Errc::InvalidArgument, "peer %d is out of range [0, %d)", peer, c->self().nranks);
    a.peer = peer;
    needBuffer(sendbuff, checkedBytes(count, a.dtype, 1), "sendbuff");
    if (peer == c->self().rank && !group::active())
      fail(Errc::InvalidUsage, "a send to this rank itself must be inside a group with its receive");
    group::submit(c, a, hs, "horaSend");
  });
}

HORA_API horaResult_t horaRecv(void* recvbuff, size_t count, horaDataType_t datatype, int peer, horaComm_t comm,
                               horaStream_t stream) {
  return guard("horaRecv", comm, [&] {
    horaComm* c = api::checkComm(comm);
    device::StreamRef hs = api::checkStream(stream);
    coll::Args a = args(coll::Kind::Recv, c, nullptr, recvbuff, count, api::rawInt(datatype));
    if (peer < 0 || peer >= c->self().nranks) fail(Errc::InvalidArgument, "peer %d is out of range [0, %d)", peer, c->self().nranks);
    a.peer = peer;
    needBuffer(recvbuff, checkedBytes(count, a.dtype, 1), "recvbuff");
    if (peer == c->self().rank && !group::active())
      fail(Errc::InvalidUsage, "a receive from this rank itself must be inside a group with its send");
    group::submit(c, a, hs, "horaRecv");
  });
}

HORA_API horaResult_t horaAllToAll(const void* sendbuff, void* recvbuff, size_t count, horaDataType_t datatype,
                                   horaComm_t comm, horaStream_t stream) {
  return guard("horaAllToAll", comm, [&] {
    horaComm* c = api::checkComm(comm);
    device::StreamRef hs = api::checkStream(stream);
    coll::Args a = args(coll::Kind::AllToAll, c, sendbuff, recvbuff, count, api::rawInt(datatype));
    size_t total = checkedBytes(count, a.dtype, static_cast<size_t>(c->self().nranks));
    needBuffer(sendbuff, total, "sendbuff");
    needBuffer(recvbuff, total, "recvbuff");
    checkOverlap(sendbuff, total, recvbuff, total, recvbuff);
    group::submit(c, a, hs, "horaAllToAll");
  });
}

HORA_API horaResult_t horaBarrier(horaComm_t comm, horaStream_t stream) {
  return guard("horaBarrier", comm, [&] {
    horaComm* c = api::checkComm(comm);
    device::StreamRef hs = api::checkStream(stream);
    coll::Args a = args(coll::Kind::Barrier, c, nullptr, nullptr, 0, horaUint8);
    group::submit(c, a, hs, "horaBarrier");
  });
}

// Gather and Scatter: only the root's big buffer (nranks * count elements) is used, so another
// rank may pass NULL for it. In place on the root, the root's block of the big buffer is the
// other buffer.
HORA_API horaResult_t horaGather(const void* sendbuff, void* recvbuff, size_t count, horaDataType_t datatype, int root,
                                 horaComm_t comm, horaStream_t stream) {
  return guard("horaGather", comm, [&] {
    horaComm* c = api::checkComm(comm);
    device::StreamRef hs = api::checkStream(stream);
    coll::Args a = args(coll::Kind::Gather, c, sendbuff, recvbuff, count, api::rawInt(datatype));
    checkRoot(root, c);
    a.root = root;
    size_t bytes = checkedBytes(count, a.dtype, 1);
    size_t total = checkedBytes(count, a.dtype, static_cast<size_t>(c->self().nranks));  // on every rank: all fail alike
    needBuffer(sendbuff, bytes, "sendbuff");
    if (c->self().rank == root) {
      needBuffer(recvbuff, total, "recvbuff (on the root)");
      const void* mine = recvbuff ? static_cast<uint8_t*>(recvbuff) + bytes * static_cast<size_t>(root) : nullptr;
      checkOverlap(sendbuff, bytes, recvbuff, total, mine);
    }
    group::submit(c, a, hs, "horaGather");
  });
}

HORA_API horaResult_t horaScatter(const void* sendbuff, void* recvbuff, size_t count, horaDataType_t datatype, int root,
                                  horaComm_t comm, horaStream_t stream) {
  return guard("horaScatter", comm, [&] {
    horaComm* c = api::checkComm(comm);
    device::StreamRef hs = api::checkStream(stream);
    coll::Args a = args(coll::Kind::Scatter, c, sendbuff, recvbuff, count, api::rawInt(datatype));
    checkRoot(root, c);
    a.root = root;
    size_t bytes = checkedBytes(count, a.dtype, 1);
    size_t total = checkedBytes(count, a.dtype, static_cast<size_t>(c->self().nranks));
    needBuffer(recvbuff, bytes, "recvbuff");
    if (c->self().rank == root) {
      needBuffer(sendbuff, total, "sendbuff (on the root)");
      const void* mine = sendbuff ? static_cast<const uint8_t*>(sendbuff) + bytes * static_cast<size_t>(root) : nullptr;
      // In place: recvbuff is the root's block of sendbuff.
      if (recvbuff != mine && overlaps(sendbuff, total, recvbuff, bytes))
        fail(Errc::InvalidArgument, "sendbuff and recvbuff overlap without being in place");
    }
    group::submit(c, a, hs, "horaScatter");
  });
}
