// hora-soak's two halves: the random calls with their checks (hora_soak.cc), and --chaos
// (hora_soak_chaos*.cc, hora_soak_hosts.cc), which runs rounds of those calls on ranks it kills,
// stops and resumes, and with --hosts on network-namespace hosts whose cables it cuts.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "hora.h"

namespace hora_soak {

// What one round of random calls did on one rank.
struct Round {
  uint64_t calls = 0;           // calls that returned (their results checked)
  uint64_t wrongResults = 0;    // of them, results that were wrong
  std::string firstWrong;       // the first wrong one, said
  horaResult_t error = horaSuccess;  // the call that failed, if one did (the round stops there)
  std::string errorCall;        // "horaAllReduce in call 7 (allreduce float sum count 5 in place)"
  std::string errorText;        // horaGetLastError of it
};

// Makes `calls` random calls on comm, numbered from `first` and drawn from `seed` (the same on
// every rank of comm), buffers up to maxBytes, checking every result as hora-soak does; stops
// at the first error. A collective call of comm's ranks.
Round soakRound(horaComm_t comm, uint64_t seed, uint64_t first, uint64_t calls, size_t maxBytes);

// An option's unsigned value (decimal, 0x hex or 0 octal) within [lo, hi]; false for anything
// else (the caller says so, with its own usage).
bool parseUnsigned(const char* text, uint64_t lo, uint64_t hi, uint64_t* out);

// hora-soak --chaos ... (and --chaos-rank, the ranks it starts).
int chaosMain(int argc, char** argv);

}  // namespace hora_soak
