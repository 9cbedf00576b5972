// horaCommDump: the flight recorder of one communicator, written on demand (comm/trace.h).
#include "api/guard.h"

using namespace hora;
using api::guard;

HORA_API horaResult_t horaCommDump(horaComm_t comm, const char* path) {
  return guard("horaCommDump", comm, [&] {
    horaComm* c = api::checkCommAny(comm);
    trace::dumpOne(*c->trace, path ? path : "");
  });
}
