// Groups, host streams, and the logging's reset: the entry points that act on no communicator.
#include "api/guard.h"
#include "base/log.h"
#include "comm/config.h"
#include "comm/group.h"
#include "comm/device.h"
#include "comm/stream.h"

using namespace hora;
using api::guard;

HORA_API horaResult_t horaGroupStart(void) {
  return guard("horaGroupStart", nullptr, [&] { group::start(); });
}

HORA_API horaResult_t horaGroupEnd(void) {
  return api::guardPending("horaGroupEnd", nullptr, [&] { return group::end(); });
}

HORA_API horaResult_t horaGroupSimulateEnd(horaSimInfo_t* simInfo) {
  return guard("horaGroupSimulateEnd", nullptr, [&] {
    if (!simInfo) fail(Errc::InvalidArgument, "simInfo is NULL");
    if (simInfo->magic != HORA_SIM_INFO_MAGIC || simInfo->size < sizeof(horaSimInfo_t))
      fail(Errc::InvalidArgument, "simInfo was not initialised with HORA_SIM_INFO_INITIALIZER");
    simInfo->estimatedTime = static_cast<float>(group::simulateEnd());
  });
}

// No result to return: an environment that does not parse leaves the logging as it was, and
// says why.
HORA_API void horaResetDebugInit(void) {
  try {
    reloadLogging();
  } catch (const std::exception& e) {
    try {
      HORA_WARN(log::kEnv, "horaResetDebugInit: %s; the logging settings stay as they were", e.what());
    } catch (...) {
    }
  }
}

HORA_API horaResult_t horaStreamCreate(horaStream_t* stream) {
  return guard("horaStreamCreate", nullptr, [&] {
    if (!stream) fail(Errc::InvalidArgument, "stream is NULL");
    *stream = reinterpret_cast<horaStream_t>(new HostStream());
  });
}

HORA_API horaResult_t horaStreamSynchronize(horaStream_t stream) {
  return guard("horaStreamSynchronize", nullptr, [&] {
    if (!stream) fail(Errc::InvalidArgument, "stream is NULL (the NULL stream is synchronous: nothing to wait for)");
    const device::StreamRef s = device::resolve(stream);
    if (s.cuda) device::synchronize(s.cuda);
    else s.host->synchronize();
  });
}

HORA_API horaResult_t horaStreamQuery(horaStream_t stream) {
  bool done = true;
  horaResult_t r = guard("horaStreamQuery", nullptr, [&] {
    if (!stream) fail(Errc::InvalidArgument, "stream is NULL");
    const device::StreamRef s = device::resolve(stream);
    done = s.cuda ? device::query(s.cuda) : s.host->query();
  });
  return r == horaSuccess && !done ? horaInProgress : r;
}

// Returns the stream's unreported error, if its last work failed; the stream is freed either way.
HORA_API horaResult_t horaStreamDestroy(horaStream_t stream) {
  if (!stream) return horaSuccess;
  return guard("horaStreamDestroy", nullptr, [&] {
    HostStream* s = HostStream::fromHandle(stream);
    s->unregister();
    std::unique_ptr<HostStream> owned(s);
    s->synchronize();  // throws the unreported error; owned frees the stream on the way out
  });
}
