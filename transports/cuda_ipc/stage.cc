// The CUDA IPC stage: a stage provider (transports/registry.h) that gives the ranks of one host
// a shared stage whose regions are device memory, each rank's mapped by the others through CUDA
// IPC (or shared as the pointer itself between ranks that are threads of one process,
// gpu/regions.h), over the host stage's counters. The shared-stage algorithms then run a large
// AllReduce on device buffers as they run one on host buffers, their copies and reductions
// kernels on a device engine that read the peers' regions where they lie (comm/device.cc).
//
// Layout: each rank's region is SharedStage::kSlots slots of kSlotBytes. Set up by the first
// call that wants it; when any rank cannot (no device memory, a region another cannot map, a
// device another's cannot reach), none uses it, and device buffers are bounced through host
// memory instead.
#include "base/log.h"
#include "gpu/cuda.h"
#include "gpu/regions.h"
#include "transports/registry.h"
#include "transports/stage.h"

namespace hora::cuda_ipc {

namespace {

// A slot holds a chunk of a large AllReduce: 8 MiB keeps each kernel's launch small beside its
// work.
constexpr size_t kSlotBytes = size_t(8) << 20;

// The stage, holding the regions it runs on: they go with it.
class IpcStage final : public transport::RegionStage {
 public:
  IpcStage(std::shared_ptr<const transport::SharedStage> host, gpu::Regions&& regions)
      : RegionStage(std::move(host), regions.byRank(), transport::SharedStage::kSlots * kSlotBytes),
        regions_(std::move(regions)) {}

 private:
  gpu::Regions regions_;
};

std::shared_ptr<transport::SharedStage> provide(const transport::StageRequest& r, std::string* why) {
  const int rank = r.host->ranks()[static_cast<size_t>(r.host->index())];
  const int nranks = r.host->size();
  std::string mine = r.why;
  uint8_t* region = nullptr;
  if (r.ready) {
    try {
      region = gpu::allocateRegion(transport::SharedStage::kSlots * kSlotBytes);
    } catch (const Error& e) {
      mine = e.what();
    }
  }
  gpu::Regions regions;
  regions.map(rank, nranks, r.device, region, mine, r.exchange);
  const bool ok = r.ready && regions.ok();
  if (!r.everyRank(ok)) {
    *why = !r.ready ? r.why : regions.why();
    return nullptr;
  }
  HORA_INFO(log::kInit, "rank %d: device AllReduce through CUDA IPC between the %d ranks of this host (device %d, "
            "%zu MiB slots)", rank, nranks, r.device, kSlotBytes >> 20);
  return std::make_shared<IpcStage>(r.host, std::move(regions));
}

}  // namespace

transport::StageProviderRegistration stageRegistration() {
  return {"cuda_ipc", "the ranks' GPU memory mapped through CUDA IPC, for large AllReduces on device buffers", provide};
}

}  // namespace hora::cuda_ipc
