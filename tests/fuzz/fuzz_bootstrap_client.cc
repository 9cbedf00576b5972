// A rank's side of the bootstrap (src/comm/bootstrap.h): what a BootstrapClient makes of the
// frames the rendezvous sends it. A fake root on an abstract Unix socket completes the
// handshake, then sends the input's bytes after its first three and closes. The first byte is
// the job's size (1..4), the second the rank, the third what the rank does: up to three
// allgathers, or awaiting the root's failure report.
//
// Invariants: an allgather returns exactly nranks blobs, and the frame it consumed is the
// Result frame that encodes them, byte for byte (so nothing is invented, lost or read twice);
// otherwise it throws hora::Error with a text, and an error report from the root is a
// RendezvousFailure that carries the report's text.
#include <poll.h>
#include <sys/socket.h>

#include <atomic>
#include <algorithm>
#include <cstring>
#include <string>
#include <thread>

#include "base/handshake.h"
#include "base/wait.h"
#include "comm/bootstrap.h"
#include "bootstrap_wire.h"
#include "fuzz.h"
#include "unit_handshake.h"

using namespace hora;

namespace {

Fd gListener;
SockAddr gAddress;
const Secret gSecret = unit::makeSecret(3);

// The fake root: one connection, the handshake, then `bytes`, then a close once the rank has
// closed its end (so that nothing the rank sent is lost to a reset).
void serve(const std::string& bytes) {
  if (!fuzz::pollOne(gListener.get(), POLLIN, 10000)) fuzz::bug("the rank never connected to the fake root");
  Fd fd(::accept4(gListener.get(), nullptr, nullptr, SOCK_CLOEXEC));
  if (!fd.valid()) fuzz::bug("accept failed");
  Handshake hs(Handshake::Role::Server, fd.get(), gSecret, LinkKind::Bootstrap);
  try {
    while (!hs.step()) fuzz::pollOne(fd.get(), hs.events(), 1000);
  } catch (const Error& e) {
    fuzz::bug("the rank's handshake failed", e.what());
  }
  (void)fuzz::sendAll(fd.get(), bytes.data(), bytes.size());  // false: the rank gave up and closed
  ::shutdown(fd.get(), SHUT_WR);
  char sink[4096];
  for (;;) {
    if (!fuzz::pollOne(fd.get(), POLLIN, 10000)) fuzz::bug("the rank neither read nor closed");
    ssize_t n = ::recv(fd.get(), sink, sizeof sink, MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) break;
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  gAddress = SockAddr::abstractUnix("hora-fuzz-bootstrap-client-" + std::to_string(getpid()));
  gListener = listenSocket(gAddress);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::Input in(data, size);
  const int nranks = 1 + in.u8() % 4;
  const int rank = in.u8() % nranks;
  const uint8_t what = in.u8();
  const std::string bytes = in.rest();
  std::thread root(serve, bytes);

  static const std::atomic<bool> never{false};
  Waiter w(milliseconds(10000), &never, [] { return std::string("the fake root"); });
  UniqueId id;
  id.root = gAddress;
  id.secret = gSecret;
  {
    BootstrapClient client(id, rank, nranks, w);
    if (what & 1) {
      // Between rounds: only an error report may come, and it is thrown as such.
      try {
        client.awaitFailureReport(milliseconds(10000));
      } catch (const RendezvousFailure& f) {
        FUZZ_CHECK(bytes.size() >= 8 && bytes.compare(0, 4, std::string("\3\0\0\0", 4)) == 0,
                   "a failure report from a frame that is not an error frame");
        uint32_t len;
        memcpy(&len, bytes.data() + 4, 4);
        // The payload: the u32 code of the failure, then its text, which the rank shows made
        // printable and at most 4096 bytes long (peerText), never empty.
        const std::string payload = bytes.substr(8, len);
        const std::string why = peerText(payload.substr(std::min<size_t>(payload.size(), 4)));
        FUZZ_CHECK(std::string(f.what()) == "the rendezvous failed: " + (why.empty() ? "(it gave no reason)" : why),
                   "the failure report's text is not the root's, made printable");
        uint32_t code = 6;
        if (payload.size() >= 4) memcpy(&code, payload.data(), 4);
        const bool known = code == 2 || code == 4 || code == 5 || code == 8;
        FUZZ_CHECK(f.code() == (known ? static_cast<Errc>(code) : Errc::Remote), "the failure report's code");
      } catch (...) {
        fuzz::bug("awaitFailureReport threw something other than the root's report");
      }
    } else {
      size_t consumed = 0;
      for (int round = 0; round < 1 + (what >> 1) % 3; ++round) {
        std::vector<std::string> blobs;
        const std::string mine = "rank " + std::to_string(rank) + " round " + std::to_string(round);
        if (!fuzz::returnsOrFails([&] { blobs = client.allgather(mine, w); })) break;
        FUZZ_CHECK(blobs.size() == static_cast<size_t>(nranks), "an allgather returned another number of blobs");
        std::string payload;
        for (const std::string& b : blobs) {
          const uint32_t len = static_cast<uint32_t>(b.size());
          payload.append(reinterpret_cast<const char*>(&len), 4);
          payload += b;
        }
        const std::string f = fuzz::bootstrapFrame(fuzz::kResult, payload);
        FUZZ_CHECK(bytes.compare(consumed, f.size(), f) == 0, "an allgather's blobs are not the root's frame");
        consumed += f.size();
      }
    }
  }
  root.join();
  return 0;
}
