// The rendezvous (src/comm/bootstrap.h) as ranks drive it: a real root thread on an abstract
// Unix socket, 1..3 ranks joined through BootstrapClient, then the input as a script of what
// each rank writes to its link:
//   op byte: rank (low 2 bits, mod nranks) and action (high bits): 0 a Gather frame, 1 raw
//   bytes, 2 a Bye frame, 3 an Error frame, 4 a close; then u8 length and that many bytes.
// After the script every rank closes its sending side and reads what the root sent it.
//
// Invariants: the root ends (its job done, or failed and every rank told) and never hangs or
// crashes; each rank receives only Result frames then at most one Error frame, in that order;
// the Result of round r holds every rank's r-th Gather blob in rank order (while the ranks
// wrote only well-formed frames) and is the same for every rank; an Error frame holds a
// non-empty, printable text; nothing follows it.
#include <poll.h>
#include <sys/socket.h>

#include <atomic>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "base/log.h"
#include "base/wait.h"
#include "comm/bootstrap.h"
#include "bootstrap_wire.h"
#include "fuzz.h"
#include "unit_handshake.h"

using namespace hora;

namespace {

const Secret gSecret = unit::makeSecret(5);
int gJob = 0;

// Everything the root sent on fd until it closed.
std::string readToEnd(int fd, int rank, RendezvousEnd& end) {
  std::string got;
  char buf[65536];
  for (;;) {
    if (!fuzz::pollOne(fd, POLLIN, 20000))
      fuzz::bug("the root neither wrote nor closed a rank's link for 20 s",
                "rank " + std::to_string(rank) + ", " + std::to_string(got.size()) + " bytes read, the root " +
                    (end.await(milliseconds(0)) ? "ended" : "still running"));
    ssize_t n = ::recv(fd, buf, sizeof buf, MSG_DONTWAIT);
    if (n > 0) got.append(buf, static_cast<size_t>(n));
    else if (n == 0 || (errno != EAGAIN && errno != EINTR)) return got;
  }
}

bool printable(const std::string& s) {
  for (char c : s)
    if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) > 0x7e) return false;
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  log::configure(log::Level::None, 0);  // each failed rendezvous would WARN
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::Input in(data, size);
  const int nranks = 1 + in.u8() % 3;
  auto end = std::make_shared<RendezvousEnd>();
  const SockAddr at = SockAddr::abstractUnix("hora-fuzz-root-" + std::to_string(getpid()) + "-" + std::to_string(gJob++));
  const UniqueId id = startRendezvous(at, gSecret, milliseconds(5000), end);

  static const std::atomic<bool> never{false};
  Waiter w(milliseconds(10000), &never, [] { return std::string("the root"); });
  std::vector<std::unique_ptr<BootstrapClient>> ranks;
  for (int r = 0; r < nranks; ++r) ranks.push_back(std::make_unique<BootstrapClient>(id, r, nranks, w));

  // The script; `gathers` holds each rank's Gather blobs while every frame was well-formed.
  std::vector<std::vector<std::string>> gathers(static_cast<size_t>(nranks));
  std::vector<bool> closed(static_cast<size_t>(nranks));
  bool modelled = true;
  while (in.left()) {
    const uint8_t op = in.u8();
    const size_t r = (op & 3) % static_cast<size_t>(nranks);
    const int action = (op >> 2) % 6;
    const std::string bytes = in.bytes(in.u8());
    if (closed[r]) continue;
    const int fd = ranks[r]->fd();
    std::string out;
    switch (action) {
      case 0: out = fuzz::bootstrapFrame(fuzz::kGather, bytes); gathers[r].push_back(bytes); break;
      case 1: out = bytes; modelled = false; break;
      case 2: out = fuzz::bootstrapFrame(fuzz::kBye, bytes); break;
      case 3: out = fuzz::bootstrapFrame(fuzz::kError, bytes); break;
      case 4: ::shutdown(fd, SHUT_WR); closed[r] = true; break;
      case 5: out = fuzz::bootstrapFrame(fuzz::kGaveUp, bytes); break;
    }
    // The root may have failed and closed already: then the write fails, as it would for a rank.
    (void)fuzz::sendAll(fd, out.data(), out.size());
  }
  for (auto& rk : ranks) ::shutdown(rk->fd(), SHUT_WR);

  std::vector<std::vector<std::string>> results(static_cast<size_t>(nranks));
  for (int r = 0; r < nranks; ++r) {
    const std::string got = readToEnd(ranks[static_cast<size_t>(r)]->fd(), r, *end);
    size_t off = 0;
    bool failed = false;
    while (off < got.size()) {
      FUZZ_CHECK(!failed, "the root sent rank " + std::to_string(r) + " something after its error report");
      FUZZ_CHECK(got.size() - off >= 8, "a truncated frame from the root");
      uint32_t type, len;
      memcpy(&type, got.data() + off, 4);
      memcpy(&len, got.data() + off + 4, 4);
      FUZZ_CHECK(got.size() - off - 8 >= len, "a truncated frame from the root");
      const std::string payload = got.substr(off + 8, len);
      off += 8 + len;
      if (type == fuzz::kError) {
        // The u32 code of the failure (an Errc), then a printable text.
        FUZZ_CHECK(payload.size() > 4, "an error report without a code and a text");
        uint32_t code;
        memcpy(&code, payload.data(), 4);
        FUZZ_CHECK(code == 2 || code == 4 || code == 5 || code == 6 || code == 8,
                   "an error report with code " + std::to_string(code));
        FUZZ_CHECK(printable(payload.substr(4)), "an error report that is not printable: " + payload.substr(4));
        failed = true;
        continue;
      }
      FUZZ_CHECK(type == fuzz::kResult, "the root sent a frame of type " + std::to_string(type));
      results[static_cast<size_t>(r)].push_back(payload);
    }
  }
  for (int r = 0; r < nranks; ++r) {
    const auto& mine = results[static_cast<size_t>(r)];
    for (size_t round = 0; round < mine.size(); ++round) {
      for (int q = 0; q < nranks; ++q)
        if (round < results[static_cast<size_t>(q)].size())
          FUZZ_CHECK(results[static_cast<size_t>(q)][round] == mine[round], "ranks got different results of a round");
      if (!modelled) continue;
      std::string expect;
      for (int q = 0; q < nranks; ++q) {
        const auto& g = gathers[static_cast<size_t>(q)];
        FUZZ_CHECK(round < g.size(), "the root answered a round that a rank never gathered");
        const uint32_t len = static_cast<uint32_t>(g[round].size());
        expect.append(reinterpret_cast<const char*>(&len), 4);
        expect += g[round];
      }
      FUZZ_CHECK(mine[round] == expect, "a round's result is not the ranks' blobs in rank order");
    }
  }
  ranks.clear();
  FUZZ_CHECK(end->awaitFinished(milliseconds(20000)), "the root did not end after every rank closed");
  return 0;
}
