#include "gpu/regions.h"

#include <unistd.h>

#include <cstring>
#include <mutex>
#include <unordered_map>

#include "base/error.h"
#include "base/log.h"
#include "gpu/cuda.h"

namespace hora::gpu {

namespace {

// The regions of this process, with their uses.
std::mutex gRegionsMu;
std::unordered_map<uint8_t*, int>& uses() {
  static auto* m = new std::unordered_map<uint8_t*, int>();  // never destroyed: workers may outlive exit
  return *m;
}

// What each rank says of its region (the exchange's record).
struct Record {
  unsigned char handle[64];
  uint64_t region;
  int32_t pid, device, ok, pad;
  char uuid[40];
};

}  // namespace

uint8_t* allocateRegion(size_t bytes) {
  auto* p = static_cast<uint8_t*>(cuda::deviceAlloc(bytes));
  retainRegion(p);
  return p;
}

void retainRegion(uint8_t* p) {
  std::lock_guard<std::mutex> lock(gRegionsMu);
  ++uses()[p];
}

void releaseRegion(uint8_t* p) {
  if (!p) return;
  {
    std::lock_guard<std::mutex> lock(gRegionsMu);
    auto it = uses().find(p);
    if (it != uses().end() && --it->second > 0) return;
    if (it != uses().end()) uses().erase(it);
  }
  cuda::deviceFree(p);
}

Regions& Regions::operator=(Regions&& o) noexcept {
  if (this == &o) return *this;
  close();
  ok_ = o.ok_;
  why_ = std::move(o.why_);
  mine_ = o.mine_;
  byRank_ = std::move(o.byRank_);
  opened_ = std::move(o.opened_);
  retained_ = std::move(o.retained_);
  clique_ = std::move(o.clique_);
  sharing_ = std::move(o.sharing_);
  o.leak();
  return *this;
}

void Regions::map(int rank, int nranks, int device, uint8_t* mine, std::string why, const Exchange& exchange) {
  close();
  mine_ = mine;
  why_ = std::move(why);
  Record me{};
  try {
    snprintf(me.uuid, sizeof me.uuid, "%s", cuda::deviceUuid(device).c_str());
  } catch (const Error& e) {
    // (Without it, this rank's sharing of a GPU with another process goes unseen: said, not fatal.)
    HORA_INFO(log::kInit, "rank %d: the UUID of CUDA device %d: %s", rank, device, e.what());
  }
  me.ok = mine != nullptr;
  if (me.ok) {
    try {
      cuda::IpcHandle h = cuda::ipcHandle(mine);
      memcpy(me.handle, h.bytes, sizeof me.handle);
    } catch (const Error& e) {
      me.ok = 0;
      why_ = e.what();
    }
  }
  me.region = reinterpret_cast<uintptr_t>(mine);
  me.pid = static_cast<int32_t>(getpid());
  me.device = device;
  std::vector<Record> all(static_cast<size_t>(nranks));
  exchange(&me, all.data(), sizeof(Record));

  for (int j = 0; j < nranks; ++j)
    if (all[static_cast<size_t>(j)].pid == me.pid && all[static_cast<size_t>(j)].device == me.device) clique_.push_back(j);
  for (int i = 0; i < nranks && sharing_.empty(); ++i)
    for (int j = i + 1; j < nranks; ++j) {
      const Record &a = all[static_cast<size_t>(i)], &b = all[static_cast<size_t>(j)];
      if (a.uuid[0] && strncmp(a.uuid, b.uuid, sizeof a.uuid) == 0 && a.pid != b.pid) {
        sharing_ = format("ranks %d and %d are processes that share GPU %.32s", i, j, a.uuid);
        break;
      }
    }

  byRank_.assign(static_cast<size_t>(nranks), nullptr);
  ok_ = true;
  for (int j = 0; j < nranks && ok_; ++j) {
    const Record& p = all[static_cast<size_t>(j)];
    uint8_t*& at = byRank_[static_cast<size_t>(j)];
    if (!p.ok) {
      ok_ = false;
      if (why_.empty()) why_ = format("rank %d could not export its region", j);
    } else if (j == rank) {
      at = mine;
    } else if (p.pid == me.pid) {
      // A rank of this process: its pointer, on this very device or one this GPU reaches.
      if (p.device == device || cuda::canAccessPeer(device, p.device)) {
        if (p.device != device) cuda::enablePeer(p.device);
        at = reinterpret_cast<uint8_t*>(static_cast<uintptr_t>(p.region));
        retainRegion(at);
        retained_.push_back(at);
      } else {
        ok_ = false;
        why_ = format("device %d cannot reach device %d of rank %d", device, p.device, j);
      }
    } else {
      try {
        cuda::IpcHandle h;
        memcpy(h.bytes, p.handle, sizeof h.bytes);
        void* mapped = cuda::ipcOpen(h);
        opened_.push_back(mapped);
        at = static_cast<uint8_t*>(mapped);
      } catch (const Error& e) {
        ok_ = false;
        why_ = format("mapping rank %d's region: %s", j, e.what());
      }
    }
  }
  if (ok_) why_.clear();
}

void Regions::close() {
  try {
    for (void* p : opened_) cuda::ipcClose(p);
    for (uint8_t* p : retained_) releaseRegion(p);
    releaseRegion(mine_);
  } catch (const Error& e) {
    HORA_WARN(log::kColl, "unmapping the ranks' device regions: %s", e.what());
  }
  leak();
}

void Regions::leak() {
  ok_ = false;
  mine_ = nullptr;
  byRank_.clear();
  opened_.clear();
  retained_.clear();
  clique_.clear();
}

}  // namespace hora::gpu
