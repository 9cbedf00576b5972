// The device path's collective set-ups, over the communicator, in the caller's thread: the
// all-gather and the agreement that mapping the ranks' device regions needs (gpu/regions.h), and
// the device stage of large AllReduces on device buffers, asked of the stage providers
// (transports/registry.h: the CUDA IPC stage).
#include "base/log.h"
#include "comm/config.h"
#include "comm/device_state.h"
#include "transports/registry.h"

namespace hora::device {

gpu::Exchange exchangeOver(horaComm* c) {
  return [c](const void* mine, void* all, size_t bytes) {
    coll::Args g;
    g.kind = coll::Kind::AllGather;
    g.sendbuf = mine;
    g.recvbuf = all;
    g.count = bytes;
    g.dtype = DataType::Uint8;
    hora::runCalls(Calls{{c, g}});
  };
}

bool everyRank(horaComm* c, bool ok) {
  int32_t mine = ok ? 1 : 0, all = 0;
  coll::Args m;
  m.kind = coll::Kind::AllReduce;
  m.sendbuf = &mine;
  m.recvbuf = &all;
  m.count = 1;
  m.dtype = DataType::Int32;
  m.op = RedOp::Min;
  hora::runCalls(Calls{{c, m}});
  return all != 0;
}

// With no stream waiting on this communicator's worker (a CUDA allocation or free may wait for
// the whole device). Its first call that fits sets it up (every rank's, alike).
void setupStage(horaComm* c, CommState& st) {
  transport::StageRequest r;
  r.host = c->stage;
  r.device = st.device;
  r.exchange = exchangeOver(c);
  r.everyRank = [c](bool ok) { return everyRank(c, ok); };
  try {
    st.engine = std::make_unique<core::DeviceEngine>(st.device);
  } catch (const Error& e) {
    r.ready = false;
    r.why = e.what();
  }
  std::string why;
  for (const transport::StageProviderRegistration& p : transport::stageProviders()) {
    std::string no;
    st.stage = p.provide(r, &no);
    if (st.stage) {
      st.ipc = Ipc::On;
      return;
    }
    if (!no.empty()) why += (why.empty() ? "" : "; ") + std::string(p.name) + ": " + no;
  }
  st.ipc = Ipc::Off;
  HORA_INFO(log::kInit, "rank %d: no device stage (%s); device buffers are bounced through host memory", c->self().rank,
            why.empty() ? "another rank could not map every region" : why.c_str());
  st.engine.reset();
}

}  // namespace hora::device
