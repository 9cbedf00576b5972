// The rendezvous's frames between the root and the ranks (comm/bootstrap.cc: a rank's side;
// comm/bootstrap_root.cc: the root's), after the handshake. Private to those two files.
#pragma once
#include <cstdint>
#include <cstring>
#include <string>

#include "base/error.h"
#include "base/handshake.h"
#include "comm/bootstrap.h"

namespace hora::bootstrap_wire {

// Gather, Error and Bye go from a rank to the root; Result and Error from the root to ranks (the
// root's Error: the u32 code of the failure, then its text),
// Reject from the root to a process that it turns away (its rank is taken, or its size is not
// the job's) without failing the job.
// Error: a rank failed during init (its own failure, or a peer's it saw); GaveUp: a rank stopped
// waiting for the others (its timeout), the one case the root reports as a timeout when ranks
// are still missing.
enum class FrameType : uint32_t { Gather = 1, Result = 2, Error = 3, Bye = 4, Reject = 5, GaveUp = 6 };

// Who joins: the rank and size it was started with, and its host and pid, so that a process
// turned away can be told which one holds its rank.
struct HelloPayload {
  uint32_t rank, nranks, pid;
  char host[kHandshakePayloadBytes - 12];  // NUL-padded, cut to fit
};
static_assert(sizeof(HelloPayload) == kHandshakePayloadBytes, "the hello fills the handshake's payload");
// A hello with nranks 0 and this rank releases a rendezvous nobody joined (releaseRendezvous).
constexpr uint32_t kReleaseRank = 0xfffffffeu;

// "rank R (host, pid P)", as PeerInfo::name() says it.
inline std::string rankName(int rank, const std::string& host, int pid) {
  return format("rank %d (%s, pid %d)", rank, host.c_str(), pid);
}

inline void putU32(std::string& s, uint32_t v) { s.append(reinterpret_cast<const char*>(&v), 4); }

inline std::string frame(FrameType t, const std::string& payload) {
  std::string s;
  putU32(s, static_cast<uint32_t>(t));
  putU32(s, static_cast<uint32_t>(payload.size()));
  return s + payload;
}

// The root's report of a failure, as a rank throws it: with the failure's code (a rank that
// never joined is a timeout; a rank that failed, a remote error).
inline RendezvousFailure rootReport(const std::string& payload) {
  uint32_t code = static_cast<uint32_t>(Errc::Remote);
  if (payload.size() >= 4) memcpy(&code, payload.data(), 4);
  const bool known = code == static_cast<uint32_t>(Errc::Timeout) || code == static_cast<uint32_t>(Errc::InvalidUsage) ||
                     code == static_cast<uint32_t>(Errc::InvalidArgument) || code == static_cast<uint32_t>(Errc::System);
  // The root's text, made fit to show (a C caller's text would end at a NUL byte).
  const std::string why = peerText(payload.substr(std::min<size_t>(payload.size(), 4)));
  return RendezvousFailure(known ? static_cast<Errc>(code) : Errc::Remote,
                           "the rendezvous failed: " + (why.empty() ? std::string("(it gave no reason)") : why));
}

}  // namespace hora::bootstrap_wire
