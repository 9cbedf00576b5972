// Device memory that the ranks of one host map from each other: each rank allocates a region,
// and every rank maps every other's, through CUDA IPC between processes, or as the very pointer
// between ranks that are threads of one process (on one GPU, or on GPUs with peer access). Used
// by the CUDA IPC stage (transports/cuda_ipc) and by the device-initiated collectives
// (comm/device_kernels.cc); what moves between the ranks is their business: mapping is given an
// exchange (one all-gather among the ranks, made by the caller) and does no communication of
// its own.
//
// A region that ranks of this process read through its pointer is counted, and freed by the
// last of them to let it go, not by its owner: allocate() and retain() count one use, release()
// drops one.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace hora::gpu {

uint8_t* allocateRegion(size_t bytes);  // device memory of the current device, counted once
void retainRegion(uint8_t* p);
void releaseRegion(uint8_t* p);  // null: nothing

// Every rank's `bytes` at `mine` into `all` (nranks x bytes, by rank): collective, in the
// caller's thread.
using Exchange = std::function<void(const void* mine, void* all, size_t bytes)>;

// Every rank's region, mapped here.
class Regions {
 public:
  Regions() = default;
  Regions(Regions&& o) noexcept { *this = std::move(o); }
  Regions& operator=(Regions&& o) noexcept;
  Regions(const Regions&) = delete;
  Regions& operator=(const Regions&) = delete;
  ~Regions() { close(); }

  // Collective over the ranks. mine: this rank's region, from allocateRegion (it becomes this
  // object's; null where it could not allocate one, *why saying why) on CUDA device `device`.
  // ok() then says whether this rank mapped every rank's; byRank() gives them.
  void map(int rank, int nranks, int device, uint8_t* mine, std::string why, const Exchange& exchange);

  bool ok() const { return ok_; }
  const std::string& why() const { return why_; }  // why not ok ("" where it is)
  uint8_t* mine() const { return mine_; }
  const std::vector<uint8_t*>& byRank() const { return byRank_; }
  // The ranks of this process on this very device, this one included (in rank order).
  const std::vector<int>& clique() const { return clique_; }
  // "ranks 1 and 2 are processes that share GPU <uuid>" where two of the ranks are, else "".
  const std::string& sharing() const { return sharing_; }

  // Unmaps the others' regions and lets this rank's go (now rather than at destruction).
  void close();
  // Forgets every mapping and region without freeing any (a kernel may still use them).
  void leak();

 private:
  bool ok_ = false;
  std::string why_;
  uint8_t* mine_ = nullptr;
  std::vector<uint8_t*> byRank_;
  std::vector<void*> opened_;       // mapped through CUDA IPC
  std::vector<uint8_t*> retained_;  // other ranks' of this process
  std::vector<int> clique_;
  std::string sharing_;
};

}  // namespace hora::gpu
