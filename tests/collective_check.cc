#include "collective_check.h"

#include <cstring>

#include "harness.h"

namespace hora::test {

const char* collName(Coll c) {
  switch (c) {
    case Coll::AllReduce: return "AllReduce";
    case Coll::Broadcast: return "Broadcast";
    case Coll::Reduce: return "Reduce";
    case Coll::AllGather: return "AllGather";
    case Coll::ReduceScatter: return "ReduceScatter";
    case Coll::AllToAll: return "AllToAll";
    case Coll::Barrier: return "Barrier";
  }
  return "?";
}

std::string describe(const Case& c) {
  char buf[160];
  if (c.coll == Coll::Barrier) return "Barrier";
  snprintf(buf, sizeof buf, "%s %s %s count=%zu %s root=%d", collName(c.coll), typeName(c.dtype),
           c.op == horaNumOps ? "premulsum" : opName(c.op), c.count, c.inPlace ? "in-place" : "out-of-place",
           c.root);
  return buf;
}

namespace {
constexpr size_t kGuard = 64;
constexpr uint8_t kGuardByte = 0xa5;

// A buffer with guard bytes on both sides.
struct Guarded {
  std::vector<uint8_t> mem;
  size_t bytes;
  explicit Guarded(size_t b) : mem(b + 2 * kGuard, kGuardByte), bytes(b) {}
  uint8_t* data() { return mem.data() + kGuard; }
  bool guardsIntact() const {
    for (size_t i = 0; i < kGuard; ++i)
      if (mem[i] != kGuardByte || mem[kGuard + bytes + i] != kGuardByte) return false;
    return true;
  }
};
}  // namespace

std::string runCase(horaComm_t comm, int rank, int n, const Case& c) {
  const horaDataType_t t = c.dtype;
  const size_t E = typeSize(t), N = c.count;
  const bool premul = c.op == horaNumOps;
  const horaRedOp_t baseOp = premul ? horaSum : c.op;
  horaRedOp_t op = c.op;
  if (premul) {
    uint8_t scalar[8];
    store(t, scalar, 0, premulScalar(t, rank));
    if (horaRedOpCreatePreMulSum(&op, scalar, t, horaScalarHostImmediate, comm) != horaSuccess)
      return std::string("horaRedOpCreatePreMulSum: ") + horaGetLastError(comm);
  }
  const size_t un = static_cast<size_t>(n), ur = static_cast<size_t>(rank);
  size_t sendElems = N, recvElems = N;
  if (c.coll == Coll::AllGather) recvElems = N * un;
  if (c.coll == Coll::ReduceScatter) sendElems = N * un;
  if (c.coll == Coll::AllToAll) sendElems = recvElems = N * un;
  if (c.coll == Coll::Barrier) sendElems = recvElems = 0;
  Guarded recv(recvElems * E), send(sendElems * E);
  // Inputs.
  uint8_t* sbuf = send.data();
  void* rbuf = recv.data();
  if (c.inPlace) {
    if (c.coll == Coll::AllGather) sbuf = recv.data() + ur * N * E;
    else if (c.coll == Coll::ReduceScatter) rbuf = send.data() + ur * N * E;
    else sbuf = recv.data();
  }
  memset(recv.data(), 0xcd, recv.bytes);  // poison: a result must be written, not left over
  if (c.coll != Coll::Broadcast || rank == c.root)
    for (size_t i = 0; i < sendElems; ++i) {
      double v = c.coll == Coll::Broadcast ? inputValue(t, horaSum, c.root, i) : inputValue(t, baseOp, rank, i);
      store(t, sbuf, i, v);
    }
  std::vector<uint8_t> sendCopy(sbuf, sbuf + sendElems * E);
  horaResult_t res = horaSuccess;
  switch (c.coll) {
    case Coll::AllReduce: res = horaAllReduce(sbuf, rbuf, N, t, op, comm, nullptr); break;
    case Coll::Broadcast: res = horaBroadcast(sbuf, rbuf, N, t, c.root, comm, nullptr); break;
    case Coll::Reduce: res = horaReduce(sbuf, rbuf, N, t, op, c.root, comm, nullptr); break;
    case Coll::AllGather: res = horaAllGather(sbuf, rbuf, N, t, comm, nullptr); break;
    case Coll::ReduceScatter: res = horaReduceScatter(sbuf, rbuf, N, t, op, comm, nullptr); break;
    case Coll::AllToAll: res = horaAllToAll(sbuf, rbuf, N, t, comm, nullptr); break;
    case Coll::Barrier: res = horaBarrier(comm, nullptr); break;
  }
  if (premul) horaRedOpDestroy(op, comm);
  if (res != horaSuccess) return describe(c) + ": " + horaGetErrorString(res) + ": " + horaGetLastError(comm);
  if (!recv.guardsIntact() || !send.guardsIntact()) return describe(c) + ": wrote outside its buffers";
  if (!c.inPlace && !sendCopy.empty() && memcmp(sendCopy.data(), sbuf, sendCopy.size()) != 0) return describe(c) + ": changed sendbuff";

  // Expected results.
  std::vector<uint8_t> want(recvElems * E);
  switch (c.coll) {
    case Coll::AllReduce:
    case Coll::Reduce:
      if (c.coll == Coll::Reduce && rank != c.root) return "";
      for (size_t i = 0; i < N; ++i) expected(t, baseOp, premul, n, i, want.data() + i * E);
      break;
    case Coll::Broadcast:
      for (size_t i = 0; i < N; ++i) store(t, want.data(), i, inputValue(t, horaSum, c.root, i));
      break;
    case Coll::AllGather:
      for (size_t q = 0; q < un; ++q)
        for (size_t i = 0; i < N; ++i) store(t, want.data(), q * N + i, inputValue(t, baseOp, static_cast<int>(q), i));
      break;
    case Coll::ReduceScatter:
      for (size_t i = 0; i < N; ++i) expected(t, baseOp, premul, n, ur * N + i, want.data() + i * E);
      break;
    case Coll::AllToAll:
      // Block q came from rank q: its block for this rank.
      for (size_t q = 0; q < un; ++q)
        for (size_t i = 0; i < N; ++i) store(t, want.data(), q * N + i, inputValue(t, baseOp, static_cast<int>(q), ur * N + i));
      break;
    case Coll::Barrier: return "";
  }
  return compare(t, rbuf, want.data(), recvElems, describe(c));
}

std::vector<Case> sweep(int n, bool withBig) {
  static const horaDataType_t types[] = {horaInt8,    horaUint8,   horaInt32,      horaUint32,
                                         horaInt64,   horaUint64,  horaFloat16,    horaFloat32,
                                         horaFloat64, horaBfloat16, horaFloat8e4m3, horaFloat8e5m2};
  static const horaRedOp_t ops[] = {horaSum, horaProd, horaMax, horaMin, horaAvg, horaNumOps};
  const size_t counts[] = {0, 1, 7, 1000 + static_cast<size_t>(n)};
  std::vector<Case> out;
  out.push_back(Case{Coll::Barrier, horaUint8, horaSum, 0, false, 0});
  for (Coll c : allColls()) {
    if (c == Coll::Barrier) continue;
    const bool reduces = c == Coll::AllReduce || c == Coll::Reduce || c == Coll::ReduceScatter;
    const bool rooted = c == Coll::Broadcast || c == Coll::Reduce;
    for (horaDataType_t t : types)
      for (horaRedOp_t op : ops) {
        if (!reduces && op != horaSum) continue;
        for (size_t count : counts)
          for (bool inPlace : {false, true}) out.push_back(Case{c, t, op, count, inPlace, rooted ? (n - 1) / 2 : 0});
      }
    if (withBig) {
      // Multi-MiB: several pipeline chunks per segment.
      // AllToAll's buffers hold n blocks: keep them as large as the others'.
      const size_t big = ((3u << 20) + 5) / (c == Coll::AllToAll ? static_cast<size_t>(n) : 1);
      out.push_back(Case{c, horaFloat32, horaSum, big, false, rooted ? n - 1 : 0});
      out.push_back(Case{c, horaFloat32, reduces ? horaAvg : horaSum, big, true, 0});
      out.push_back(Case{c, horaInt8, reduces ? horaMax : horaSum, big * 2, false, 0});
      out.push_back(Case{c, horaBfloat16, reduces ? horaNumOps : horaSum, big, true, rooted ? n / 2 : 0});
    }
  }
  return out;
}

}  // namespace hora::test
