#include "collective_check.h"

#include <cstring>
#include <functional>

#include "gpu/cuda.h"
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
    case Coll::Gather: return "Gather";
    case Coll::Scatter: return "Scatter";
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
// A device copy of a guarded buffer's whole image (guards included), freed on the way out.
struct DeviceImage {
  uint8_t* p = nullptr;
  size_t bytes = 0;
  explicit DeviceImage(size_t b) : p(static_cast<uint8_t*>(hora::cuda::deviceAlloc(b))), bytes(b) {}
  ~DeviceImage() { hora::cuda::deviceFree(p); }
  DeviceImage(const DeviceImage&) = delete;
  DeviceImage& operator=(const DeviceImage&) = delete;
};

// A kernel that copies bytes on the stream (the reduction kernel with one source).
void copyKernel(void* dst, const void* src, size_t bytes, void* stream) {
  hora::kernels::ReduceSpec s;
  s.dtype = hora::DataType::Uint8;
  void* d[1] = {dst};
  const void* in[1] = {src};
  hora::cuda::reduceAsync(d, 1, in, 1, bytes, s, stream);
}

// Runs the call with copies of the two guarded buffers in device memory: uploads their images,
// calls `call` with the device addresses of sbuf and rbuf, downloads the images again.
std::string onDevice(Guarded& send, Guarded& recv, uint8_t* sbuf, void* rbuf, const Memory& mem,
                     const std::function<horaResult_t(const void*, void*, void*)>& call, horaResult_t* res) {
  namespace cu = hora::cuda;
  try {
    DeviceImage ds(send.mem.size()), dr(recv.mem.size());
    const auto translate = [&](const void* p) -> uint8_t* {
      if (!p) return nullptr;  // a buffer a rank does not use (Gather's, Scatter's big one)
      const uint8_t* q = static_cast<const uint8_t*>(p);
      if (q >= send.mem.data() && q <= send.mem.data() + send.mem.size()) return ds.p + (q - send.mem.data());
      return dr.p + (q - recv.mem.data());
    };
    if (!mem.stream) {
      cu::copyAsync(ds.p, send.mem.data(), send.mem.size(), nullptr);
      cu::copyAsync(dr.p, recv.mem.data(), recv.mem.size(), nullptr);
      cu::streamSync(nullptr);
      *res = call(translate(sbuf), translate(rbuf), nullptr);
      cu::copyAsync(send.mem.data(), ds.p, send.mem.size(), nullptr);
      cu::copyAsync(recv.mem.data(), dr.p, recv.mem.size(), nullptr);
      cu::streamSync(nullptr);
      return "";
    }
    // On a stream: the inputs reach the call's buffers by kernels queued just before it, and the
    // results leave them by kernels queued just after it.
    DeviceImage is(send.mem.size()), ir(recv.mem.size()), os(send.mem.size()), orr(recv.mem.size());
    cu::copyAsync(is.p, send.mem.data(), send.mem.size(), nullptr);
    cu::copyAsync(ir.p, recv.mem.data(), recv.mem.size(), nullptr);
    cu::streamSync(nullptr);
    copyKernel(ds.p, is.p, send.mem.size(), mem.stream);
    copyKernel(dr.p, ir.p, recv.mem.size(), mem.stream);
    *res = call(translate(sbuf), translate(rbuf), mem.stream);
    if (*res != horaSuccess) {
      cu::streamSync(mem.stream);
      return "";
    }
    copyKernel(os.p, ds.p, send.mem.size(), mem.stream);
    copyKernel(orr.p, dr.p, recv.mem.size(), mem.stream);
    cu::copyAsync(send.mem.data(), os.p, send.mem.size(), mem.stream);
    cu::copyAsync(recv.mem.data(), orr.p, recv.mem.size(), mem.stream);
    if (horaStreamSynchronize(static_cast<horaStream_t>(mem.stream)) != horaSuccess)
      return std::string("horaStreamSynchronize: ") + horaGetLastError(nullptr);
    return "";
  } catch (const std::exception& e) {
    return std::string("device memory: ") + e.what();
  }
}
}  // namespace

std::string runCase(horaComm_t comm, int rank, int n, const Case& c, const Memory& mem) {
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
  const bool isRoot = rank == c.root;
  // Gather's and Scatter's big buffer (nranks blocks) is the root's; elsewhere it is NULL, but
  // for a call in place, whose own block lies in it (as nccl-tests makes it on every rank).
  const bool big = isRoot || c.inPlace;
  size_t sendElems = N, recvElems = N;
  if (c.coll == Coll::AllGather) recvElems = N * un;
  if (c.coll == Coll::ReduceScatter) sendElems = N * un;
  if (c.coll == Coll::AllToAll) sendElems = recvElems = N * un;
  if (c.coll == Coll::Barrier) sendElems = recvElems = 0;
  if (c.coll == Coll::Gather) recvElems = big ? N * un : 0;
  if (c.coll == Coll::Scatter) sendElems = big ? N * un : 0;
  Guarded recv(recvElems * E), send(sendElems * E);
  // Inputs.
  uint8_t* sbuf = send.data();
  void* rbuf = recv.data();
  if (c.inPlace) {
    if (c.coll == Coll::AllGather || c.coll == Coll::Gather) sbuf = recv.data() + ur * N * E;
    else if (c.coll == Coll::ReduceScatter || c.coll == Coll::Scatter) rbuf = send.data() + ur * N * E;
    else sbuf = recv.data();
  } else if (!isRoot && c.coll == Coll::Gather) {
    rbuf = nullptr;
  } else if (!isRoot && c.coll == Coll::Scatter) {
    sbuf = nullptr;
  }
  memset(recv.data(), 0xcd, recv.bytes);  // poison: a result must be written, not left over
  // Broadcast and Scatter read the root's input only: the others' stay as they are.
  const bool fromRoot = c.coll == Coll::Broadcast || c.coll == Coll::Scatter;
  if (!fromRoot || isRoot)
    for (size_t i = 0; i < sendElems; ++i) {
      double v = fromRoot ? inputValue(t, horaSum, c.root, i) : inputValue(t, baseOp, rank, i);
      store(t, sbuf, i, v);
    }
  std::vector<uint8_t> sendCopy(sbuf, sbuf + (sbuf ? sendElems * E : 0));
  const std::vector<uint8_t> recvCopy(recv.data(), recv.data() + recv.bytes);
  horaResult_t res = horaSuccess;
  const auto call = [&](const void* s, void* r, void* stream) {
    horaStream_t st = static_cast<horaStream_t>(stream);
    switch (c.coll) {
      case Coll::AllReduce: return horaAllReduce(s, r, N, t, op, comm, st);
      case Coll::Broadcast: return horaBroadcast(s, r, N, t, c.root, comm, st);
      case Coll::Reduce: return horaReduce(s, r, N, t, op, c.root, comm, st);
      case Coll::AllGather: return horaAllGather(s, r, N, t, comm, st);
      case Coll::ReduceScatter: return horaReduceScatter(s, r, N, t, op, comm, st);
      case Coll::AllToAll: return horaAllToAll(s, r, N, t, comm, st);
      case Coll::Barrier: return horaBarrier(comm, st);
      case Coll::Gather: return horaGather(s, r, N, t, c.root, comm, st);
      case Coll::Scatter: return horaScatter(s, r, N, t, c.root, comm, st);
    }
    return horaInternalError;
  };
  if (mem.device) {
    const std::string e = onDevice(send, recv, sbuf, rbuf, mem, call, &res);
    if (!e.empty()) return describe(c) + ": " + e;
  } else {
    res = call(sbuf, rbuf, nullptr);
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
    case Coll::Gather:
      if (!isRoot) {  // nothing written: in place, the block it sent and the poison around it
        if (memcmp(recv.data(), recvCopy.data(), recv.bytes) != 0) return describe(c) + ": wrote a non-root's buffer";
        return "";
      }
      for (size_t q = 0; q < un; ++q)
        for (size_t i = 0; i < N; ++i) store(t, want.data(), q * N + i, inputValue(t, baseOp, static_cast<int>(q), i));
      break;
    case Coll::Scatter:
      // Block r of the root's input; in place, the rest of the vector as it was.
      for (size_t i = 0; i < N; ++i) store(t, want.data(), i, inputValue(t, horaSum, c.root, ur * N + i));
      if (c.inPlace) {
        const size_t before = ur * N * E, after = (ur + 1) * N * E, all = un * N * E;
        if (memcmp(sbuf, sendCopy.data(), before) != 0 || memcmp(sbuf + after, sendCopy.data() + after, all - after) != 0)
          return describe(c) + ": wrote sendbuff outside this rank's block";
      }
      break;
  }
  return compare(t, rbuf, want.data(), recvElems, describe(c));
}

const std::vector<horaDataType_t>& allTypes() {
  static const std::vector<horaDataType_t> types{horaInt8,    horaUint8,    horaInt32,      horaUint32,
                                                 horaInt64,   horaUint64,   horaFloat16,    horaFloat32,
                                                 horaFloat64, horaBfloat16, horaFloat8e4m3, horaFloat8e5m2};
  return types;
}

std::vector<Case> sweep(int n, bool withBig) {
  const std::vector<horaDataType_t>& types = allTypes();
  static const horaRedOp_t ops[] = {horaSum, horaProd, horaMax, horaMin, horaAvg, horaNumOps};
  const size_t counts[] = {0, 1, 7, 1000 + static_cast<size_t>(n)};
  std::vector<Case> out;
  out.push_back(Case{Coll::Barrier, horaUint8, horaSum, 0, false, 0});
  for (Coll c : allColls()) {
    if (c == Coll::Barrier) continue;
    const bool reduces = c == Coll::AllReduce || c == Coll::Reduce || c == Coll::ReduceScatter;
    const bool rooted = rootedColl(c);
    for (horaDataType_t t : types)
      for (horaRedOp_t op : ops) {
        if (!reduces && op != horaSum) continue;
        for (size_t count : counts)
          for (bool inPlace : {false, true}) out.push_back(Case{c, t, op, count, inPlace, rooted ? (n - 1) / 2 : 0});
      }
    if (withBig) {
      // Multi-MiB: several pipeline chunks per segment.
      // AllToAll's buffers hold n blocks, and so do Gather's and Scatter's at the root: keep
      // them as large as the others'.
      const bool blocks = c == Coll::AllToAll || c == Coll::Gather || c == Coll::Scatter;
      const size_t big = ((3u << 20) + 5) / (blocks ? static_cast<size_t>(n) : 1);
      out.push_back(Case{c, horaFloat32, horaSum, big, false, rooted ? n - 1 : 0});
      out.push_back(Case{c, horaFloat32, reduces ? horaAvg : horaSum, big, true, 0});
      out.push_back(Case{c, horaInt8, reduces ? horaMax : horaSum, big * 2, false, 0});
      out.push_back(Case{c, horaBfloat16, reduces ? horaNumOps : horaSum, big, true, rooted ? n / 2 : 0});
    }
  }
  return out;
}

}  // namespace hora::test
