// Internal to config.cc and config_nccl.cc: the NCCL_* half of parseConfig. config.cc keeps the
// table of variables (kVariables, with each HORA_* variable's NCCL_* twins) and the HORA_*
// parsing; where a knob's HORA_* variable is unset, it hands the twins that are set to one of the
// readNccl* functions below, which translate them (config_nccl.cc). An NCCL_* value is never an
// error: what was read goes to Config::ncclNotes and ncclSource, what was ignored (and why) to
// Config::ncclWarnings. The text helpers at the end, shared by both files, are in config.cc.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "comm/config.h"

namespace hora {

using NcclSetting = std::pair<std::string, std::string>;  // an NCCL_* variable and its value

// One knob's sources: its HORA_* variable's value, and the NCCL_* twins of its row that are set
// (blank counts as unset, as NCCL takes it).
struct KnobSource {
  std::optional<std::string> value;
  std::vector<NcclSetting> nccl;
  bool fromNccl() const;                                 // no HORA_* value, and some twin set
  const std::string* ncclValue(const char* name) const;  // the twin's value; null if unset
};

// Reads `hora` and its twins (`twins`: the table's comma list). Where both are set the HORA_*
// one wins, and a note says which NCCL_* one it overrides.
KnobSource readKnob(const EnvLookup& env, const char* hora, const char* twins, Config& c);

// Each sets its knob of `c` from the twins in `s`; called where s.value is unset.
void readNcclDebug(Config& c, const KnobSource& s);          // NCCL_DEBUG
void readNcclDebugSubsys(Config& c, const KnobSource& s);    // NCCL_DEBUG_SUBSYS
void readNcclDebugFile(Config& c, const KnobSource& s);      // NCCL_DEBUG_FILE
void readNcclSocketIfname(Config& c, const KnobSource& s);   // NCCL_SOCKET_IFNAME
// NCCL_IB_DISABLE, NCCL_SHM_DISABLE, NCCL_NET; `known`: the transports HORA_TRANSPORTS may name.
void readNcclTransports(Config& c, const KnobSource& s, const std::vector<std::string>& known);
void readNcclAlgo(Config& c, const KnobSource& s);           // NCCL_ALGO
void readNcclNsocksPerPeer(Config& c, const KnobSource& s);  // NCCL_SOCKET_NTHREADS, NCCL_NSOCKS_PERTHREAD
void readNcclIbHca(Config& c, const KnobSource& s);          // NCCL_IB_HCA
void readNcclIbGidIndex(Config& c, const KnobSource& s);     // NCCL_IB_GID_INDEX
void readNcclIbQpsPerPeer(Config& c, const KnobSource& s);   // NCCL_IB_QPS_PER_CONNECTION
void readNcclCudaIpc(Config& c, const KnobSource& s);        // NCCL_P2P_DISABLE
void readNcclCommBlocking(Config& c, const KnobSource& s);   // NCCL_COMM_BLOCKING

// Shared text helpers (config.cc): the blank-trimmed, non-empty items of a comma list; `s` in
// upper case; `items` joined by `sep`; a subsystem mask as HORA_DEBUG_SUBSYS names it.
std::vector<std::string> splitList(const std::string& s);
std::string upper(std::string s);
std::string joined(const std::vector<std::string>& items, const char* sep = ", ");
std::string subsysText(uint32_t mask);

}  // namespace hora
