// Where ranks of one host map each other's device memory: the regions exchanged and opened
// through CUDA IPC (or shared as pointers between threads of one process), counted so that a
// region another rank of this process reads is freed by the last of them, and the CUDA IPC
// stage of the device AllReduce set up over them (comm/device.cc runs calls on it; the
// device-initiated collectives map their own regions the same way, comm/device_kernels.cc).
#include <unistd.h>

#include <cstring>
#include <mutex>
#include <unordered_map>

#include "base/log.h"
#include "comm/device_state.h"
#include "transports/stage.h"

namespace hora::device {

namespace {
// Each member's region of the CUDA IPC stage holds 4 slots (coll/stage.cc) of this many bytes:
// a chunk of a large AllReduce. 8 MiB per slot keeps a kernel's launch small beside its work.
constexpr size_t kIpcSlotBytes = size_t(8) << 20;
}  // namespace

// The device-initiated collectives' regions of this process, with the number of communicators
// that use each: a rank of this process reads another's region through its very pointer, so the
// region is freed by the last of them to go, not by its owner.
std::mutex gRegionsMu;
std::unordered_map<uint8_t*, int>& sharedRegions() {
  static auto* m = new std::unordered_map<uint8_t*, int>();
  return *m;
}
void retainRegion(uint8_t* p) {
  std::lock_guard<std::mutex> lock(gRegionsMu);
  ++sharedRegions()[p];
}
void releaseRegion(uint8_t* p) {
  if (!p) return;
  {
    std::lock_guard<std::mutex> lock(gRegionsMu);
    auto it = sharedRegions().find(p);
    if (it != sharedRegions().end() && --it->second > 0) return;
    if (it != sharedRegions().end()) sharedRegions().erase(it);
  }
  cuda::deviceFree(p);
}

// Every rank's region (device memory: this rank's is `mine`, null where it could not allocate
// one), mapped here, by rank: exchanged by a collective of the communicator's own, in the
// caller's thread. *ok is cleared, with *why, where a region is missing or cannot be mapped; the
// mappings made are added to `opened`, the pointers of ranks of this process to `retained`;
// `sharing` says which ranks, if any, are processes that share one GPU (the UUIDs exchanged).
std::vector<uint8_t*> exchangeRegions(horaComm* c, CommState& st, uint8_t* mine, std::vector<void*>& opened,
                                      int32_t* ok, std::string* why, std::vector<uint8_t*>* retained,
                                      std::string* sharing, std::vector<int>* clique) {
  struct Info {
    unsigned char handle[64];
    uint64_t region;
    int32_t pid, device, ok, pad;
    char uuid[40];
  };
  Info me{};
  try {
    snprintf(me.uuid, sizeof me.uuid, "%s", cuda::deviceUuid(st.device).c_str());
  } catch (const Error& e) {
    // (Without it, this rank's sharing of a GPU with another process goes unseen: said, not fatal.)
    HORA_INFO(log::kInit, "rank %d: the UUID of CUDA device %d: %s", c->rank, st.device, e.what());
  }
  me.ok = *ok && mine;
  if (me.ok) {
    try {
      cuda::IpcHandle h = cuda::ipcHandle(mine);
      memcpy(me.handle, h.bytes, sizeof me.handle);
    } catch (const Error& e) {
      me.ok = 0;
      *why = e.what();
    }
  }
  me.region = reinterpret_cast<uintptr_t>(mine);
  me.pid = static_cast<int32_t>(getpid());
  me.device = st.device;
  std::vector<Info> all(static_cast<size_t>(c->nranks));
  coll::Args g;
  g.kind = coll::Kind::AllGather;
  g.sendbuf = &me;
  g.recvbuf = all.data();
  g.count = sizeof(Info);
  g.dtype = DataType::Uint8;
  hora::runCalls(Calls{{c, g}});
  std::vector<uint8_t*> regions(static_cast<size_t>(c->nranks));
  if (clique) {
    clique->clear();
    for (int j = 0; j < c->nranks; ++j)
      if (all[static_cast<size_t>(j)].pid == me.pid && all[static_cast<size_t>(j)].device == me.device) clique->push_back(j);
  }
  if (sharing) {
    sharing->clear();
    for (int i = 0; i < c->nranks && sharing->empty(); ++i)
      for (int j = i + 1; j < c->nranks; ++j) {
        const Info &a = all[static_cast<size_t>(i)], &b = all[static_cast<size_t>(j)];
        if (a.uuid[0] && strncmp(a.uuid, b.uuid, sizeof a.uuid) == 0 && a.pid != b.pid) {
          *sharing = format("ranks %d and %d are processes that share GPU %.32s", i, j, a.uuid);
          break;
        }
      }
  }
  *ok = 1;
  for (int j = 0; j < c->nranks && *ok; ++j) {
    const Info& p = all[static_cast<size_t>(j)];
    if (!p.ok) {
      *ok = 0;
      if (why->empty()) *why = format("rank %d could not export its region", j);
    } else if (j == c->rank) {
      regions[static_cast<size_t>(j)] = mine;
    } else if (p.pid == me.pid) {
      // A rank of this process: its pointer, on this very device or one this GPU reaches.
      if (p.device == st.device || cuda::canAccessPeer(st.device, p.device)) {
        if (p.device != st.device) cuda::enablePeer(p.device);
        regions[static_cast<size_t>(j)] = reinterpret_cast<uint8_t*>(static_cast<uintptr_t>(p.region));
        if (retained) {
          retainRegion(regions[static_cast<size_t>(j)]);
          retained->push_back(regions[static_cast<size_t>(j)]);
        }
      } else {
        *ok = 0;
        *why = format("device %d cannot reach device %d of rank %d", st.device, p.device, j);
      }
    } else {
      try {
        cuda::IpcHandle h;
        memcpy(h.bytes, p.handle, sizeof h.bytes);
        void* mapped = cuda::ipcOpen(h);
        opened.push_back(mapped);
        regions[static_cast<size_t>(j)] = static_cast<uint8_t*>(mapped);
      } catch (const Error& e) {
        *ok = 0;
        *why = format("mapping rank %d's region: %s", j, e.what());
      }
    }
  }
  return regions;
}

// Whether every rank says ok (a collective: every rank goes the same way).
bool everyRank(horaComm* c, int32_t ok) {
  int32_t all = 0;
  coll::Args m;
  m.kind = coll::Kind::AllReduce;
  m.sendbuf = &ok;
  m.recvbuf = &all;
  m.count = 1;
  m.dtype = DataType::Int32;
  m.op = RedOp::Min;
  hora::runCalls(Calls{{c, m}});
  return all != 0;
}

// Sets up the CUDA IPC stage: collective over the communicator (its first call that fits), in
// the caller's thread, with no stream waiting on this communicator's worker (a CUDA allocation
// or free may wait for the whole device).
void setupIpc(horaComm* c, CommState& st) {
  const size_t regionBytes = 4 * kIpcSlotBytes;
  std::string why;
  int32_t ok = 1;
  try {
    if (!st.region) st.region = static_cast<uint8_t*>(cuda::deviceAlloc(regionBytes));
  } catch (const Error& e) {
    why = e.what();
  }
  std::vector<uint8_t*> regions = exchangeRegions(c, st, st.region, st.opened, &ok, &why);
  if (ok) {
    try {
      st.engine = std::make_unique<core::DeviceEngine>(st.device);
    } catch (const Error& e) {
      ok = 0;
      why = e.what();
    }
  }
  if (everyRank(c, ok)) {
    st.stage = std::make_shared<transport::RegionStage>(c->stage, std::move(regions), regionBytes);
    st.ipc = Ipc::On;
    HORA_INFO(log::kInit, "rank %d: device AllReduce through CUDA IPC between the %d ranks of this host (device %d, "
              "%zu MiB slots)", c->rank, c->nranks, st.device, kIpcSlotBytes >> 20);
    return;
  }
  st.ipc = Ipc::Off;
  HORA_INFO(log::kInit, "rank %d: no CUDA IPC stage (%s); device buffers are staged through host memory", c->rank,
            why.empty() ? "another rank could not map every region" : why.c_str());
  st.engine.reset();
  for (void* p : st.opened) cuda::ipcClose(p);
  st.opened.clear();  // (the region itself goes with the communicator)
}

}  // namespace hora::device
