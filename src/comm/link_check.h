// The call check over the links (comm/call_check.h): the jobs of a call or group that send its
// check to the successor and receive the predecessor's, built by planChecks for runCalls, and
// the pieces horaCommFinalize and horaCommDestroy use (run.cc's awaitLinkChecks).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "coll/collective.h"
#include "comm/trace.h"
#include "core/executor.h"
#include "core/program.h"
#include "transports/transport.h"

struct horaComm;

namespace hora {

// For texts: a check's call, and the call that sends or receives it.
struct CheckOf {
  const horaComm* c;
  uint64_t call;  // 0: horaCommFinalize's meeting
  bool send;
  uint64_t last = 0;  // a batch received: the last call's number (else 0)
};

// What a thread keeps for its calls' checks, so that a call allocates nothing: the checks'
// programs and texts by slot, and their jobs.
struct CheckPlans {
  std::vector<core::Program> programs;
  std::vector<CheckOf> of;
  std::vector<core::Job> jobs;      // to go first on their links
  std::vector<core::Job> lateJobs;  // to run after the call's (the ranks' meeting on a stage)
  std::vector<uint64_t> tags;
  void reserve(size_t n);  // room for n checks (before any job points at one)
};

// The job of one of c's programs: what the executor needs of the communicator (run.cc).
core::Job jobOf(horaComm* c, const core::Program* program, trace::Entry* entry);

// Job::earlier for c (ctx): while this rank is stuck, the frames waiting from the predecessor
// against the checks this rank expects; each that agrees is taken. The mismatch's text, or "".
std::string earlierCheck(void* ctx, transport::Connection* conn, int peer);
// Job::describe for a check's job (ctx: its CheckOf).
std::string describeCheck(const void* ctx);
// The job that receives the n oldest checks c expects, in one program, in slot `slot`; they are
// taken off the expected.
core::Job checkRecvJob(CheckPlans& cp, size_t slot, horaComm* c, size_t n, trace::Entry* entry = nullptr);
// The checks of a call or group (its programs, adjusted arguments, the calls run at once, their
// flight-recorder entries), into cp.jobs and cp.lateJobs.
void planChecks(CheckPlans& cp, const std::vector<horaComm*>& comms,
                const std::vector<std::pair<horaComm*, coll::Args>>& calls, const std::vector<core::Program>& programs,
                const std::vector<coll::Args>& adjusted, const std::vector<size_t>& atOnce,
                const std::vector<trace::Traced>& traced);

}  // namespace hora
