// Tags: 64 bits carried by every message, so that a receiver can tell that its peer is in the
// same call. Layout: kind (8 bits) | dtype (4) | op (4) | root (16) | count mod 2^32 (32); the root
// field of a call without a root is 0x8000 for device buffers through CUDA IPC, else 0.
#include <cinttypes>

#include "base/error.h"
#include "coll/collective.h"

namespace hora::coll {

const char* kindName(Kind k) {
  switch (k) {
    case Kind::AllReduce: return "AllReduce";
    case Kind::Broadcast: return "Broadcast";
    case Kind::Reduce: return "Reduce";
    case Kind::AllGather: return "AllGather";
    case Kind::ReduceScatter: return "ReduceScatter";
    case Kind::Send: return "Send";
    case Kind::Recv: return "Recv";
    case Kind::AllToAll: return "AllToAll";
    case Kind::Barrier: return "Barrier";
    case Kind::Gather: return "Gather";
    case Kind::Scatter: return "Scatter";
  }
  return "?";
}

// The root field of a call that has none: device buffers through CUDA IPC.
constexpr uint64_t kDeviceIpcRoot = 0x8000;

static bool rooted(Kind k) {
  return k == Kind::Broadcast || k == Kind::Reduce || k == Kind::Gather || k == Kind::Scatter;
}
static bool reducing(Kind k) {
  return k == Kind::AllReduce || k == Kind::Reduce || k == Kind::ReduceScatter;
}

uint64_t makeTag(const Args& a) {
  // A send and its receive must agree, so both are tagged as Send.
  Kind k = a.kind == Kind::Recv ? Kind::Send : a.kind;
  uint64_t op = reducing(k) ? static_cast<uint64_t>(a.op) : 0xf;
  uint64_t root = rooted(k) ? static_cast<uint64_t>(a.root) & 0xffff : a.deviceIpc ? kDeviceIpcRoot : 0;
  return static_cast<uint64_t>(k) << 56 | (static_cast<uint64_t>(a.dtype) & 0xf) << 52 |
         (op & 0xf) << 48 | root << 32 | (a.count & 0xffffffffu);
}

uint64_t groupTag(const std::vector<uint64_t>& tags) {
  if (tags.size() == 1) return tags[0];
  uint64_t h = 1469598103934665603ull;  // FNV-1a over the tags, in call order
  for (uint64_t t : tags)
    for (int i = 0; i < 8; ++i) h = (h ^ ((t >> (8 * i)) & 0xff)) * 1099511628211ull;
  return kGroupKind << 56 | tags.size() << 32 | (h & 0xffffffffu);
}

std::string describeTag(uint64_t tag) {
  if (tag >> 56 == kGroupKind)
    return format("a group of %u collectives (signature %08x)", static_cast<unsigned>((tag >> 32) & 0xffffff),
                  static_cast<unsigned>(tag & 0xffffffffu));
  auto k = static_cast<Kind>(tag >> 56);
  auto dt = static_cast<DataType>((tag >> 52) & 0xf);
  unsigned op = (tag >> 48) & 0xf;
  unsigned root = (tag >> 32) & 0xffff;
  uint64_t count = tag & 0xffffffffu;
  if (static_cast<unsigned>(k) < 1 || static_cast<unsigned>(k) > static_cast<unsigned>(Kind::Scatter) ||
      static_cast<unsigned>(dt) >= static_cast<unsigned>(kNumDataTypes))
    return format("an unknown call (tag 0x%016" PRIx64 ")", tag);
  if (k == Kind::Barrier) return "Barrier()";
  std::string s = format("%s(count %" PRIu64 ", %s", k == Kind::Send ? "Send/Recv" : kindName(k),
                         count, dataTypeName(dt));
  if (reducing(k) && op < static_cast<unsigned>(kNumRedOps)) s += format(", %s", redOpName(static_cast<RedOp>(op)));
  if (rooted(k)) s += format(", root %u", root);
  else if (root == kDeviceIpcRoot) s += ", device buffers through CUDA IPC";
  return s + ")";
}

std::string describe(const Args& a) {
  if (a.kind == Kind::Barrier) return "Barrier()";
  std::string s = format("%s(count %zu, %s", kindName(a.kind), a.count, dataTypeName(a.dtype));
  if (reducing(a.kind)) s += format(", %s", redOpName(a.op));
  if (rooted(a.kind)) s += format(", root %d", a.root);
  if (a.kind == Kind::Send) s += format(", to rank %d", a.peer);
  if (a.kind == Kind::Recv) s += format(", from rank %d", a.peer);
  if (a.deviceIpc) s += ", device buffers through CUDA IPC";
  return s + ")";
}

}  // namespace hora::coll
