// Tests of the Acceptor (base/acceptor.h) on a loopback listener with good, silent, garbage
// and wrong-secret clients at once, and of its handshake timeout. The handshake itself is
// tested in test_handshake.cc.
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "base/acceptor.h"
#include "base/error.h"
#include "base/handshake.h"
#include "base/log.h"
#include "base/socket.h"
#include "unit_handshake.h"
#include "unit_net.h"

using namespace hora;
using namespace unit;

namespace {
Fd blockingConnect(const SockAddr& addr) {
  Fd fd(::socket(addr.family(), SOCK_STREAM | SOCK_CLOEXEC, 0));
  REQUIRE(fd.valid());
  REQUIRE(::connect(fd.get(), reinterpret_cast<const sockaddr*>(&addr.ss), addr.len) == 0);
  setNonBlocking(fd.get());
  return fd;
}
}  // namespace

TEST_CASE("acceptor: good + silent + garbage + wrong-secret clients", "[acceptor]") {
  // A long handshake timeout here, so that the good client can never be dropped for being
  // slow; the timeout itself is tested below with no good client involved.
  Secret s = makeSecret(11);
  Fd listener = listenSocket(SockAddr::parse("127.0.0.1:0"));
  Acceptor acc(std::move(listener), s, LinkKind::Data, std::chrono::milliseconds(600000), log::kNet);
  REQUIRE(acc.address().port() != 0);
  CHECK(acc.address().isLoopback());

  // The silent one first, so that the others are served while it hangs.
  Fd silent = blockingConnect(acc.address());
  Fd garbage = blockingConnect(acc.address());
  std::string junk(64, '\x7f');
  unit::rawWrite(garbage.get(), junk.data(), junk.size());
  Fd wrong = blockingConnect(acc.address());
  Payload wp = makePayload(66);
  Handshake wrongHs(Handshake::Role::Client, wrong.get(), makeSecret(12), LinkKind::Data, wp.b);
  Fd good = blockingConnect(acc.address());
  Payload gp = makePayload(77);
  Handshake goodHs(Handshake::Role::Client, good.get(), s, LinkKind::Data, gp.b);

  std::vector<Acceptor::Accepted> out;
  Outcome go, wo;
  unit::Guard g;
  while (!(go.done && out.size() == 1 && acc.rejected() == 2)) {
    REQUIRE(!g.expired());
    acc.advance(out);
    if (!go.done && !go.threw) {
      try {
        go.done = goodHs.step();
      } catch (const Error& e) {
        go.threw = true;
        go.what = e.what();
      }
    }
    if (wrong.valid()) {
      try {
        wrongHs.step();
      } catch (const Error& e) {
        wo.threw = true;
        wo.what = e.what();
        wrong.reset();  // a client that fails hangs up
      }
    }
    REQUIRE(!go.threw);
    REQUIRE(out.size() <= 1);
    REQUIRE(acc.rejected() <= 2);
    std::vector<pollfd> fds;
    acc.addPollFds(fds);
    if (!go.done) fds.push_back(pollfd{good.get(), goodHs.events(), 0});
    if (wrong.valid()) fds.push_back(pollfd{wrong.get(), wrongHs.events(), 0});
    ::poll(fds.data(), fds.size(), 20);
  }
  CHECK(wo.threw);
  CHECK(contains(wo.what, "secret"));
  REQUIRE(out.size() == 1);
  CHECK(memcmp(out[0].payload, gp.b, kHandshakePayloadBytes) == 0);
  CHECK(out[0].peer.isLoopback());
  CHECK(out[0].peer.port() == localAddress(good.get()).port());
  // The accepted socket is the good client's link.
  unit::rawWrite(good.get(), "data", 4);
  char buf[4];
  unit::rawRead(out[0].fd.get(), buf, 4);
  CHECK(memcmp(buf, "data", 4) == 0);
  // The garbage client's connection was closed by the acceptor: it sees EOF, or a reset since
  // the acceptor closed with unread bytes.
  {
    unit::Guard g2;
    char c;
    ssize_t r;
    int err = 0;
    while ((r = ::recv(garbage.get(), &c, 1, MSG_DONTWAIT)) < 0 && (err = errno) == EAGAIN && !g2.expired()) {
      pollfd p{garbage.get(), POLLIN, 0};
      ::poll(&p, 1, 100);
    }
    CHECK((r == 0 || (r < 0 && err == ECONNRESET)));
  }
  // Only the silent one is pending: the listener and it are polled, for reading.
  std::vector<pollfd> fds;
  acc.addPollFds(fds);
  REQUIRE(fds.size() == 2);
  CHECK(fds[1].events == POLLIN);
  acc.close();
  fds.clear();
  acc.addPollFds(fds);
  CHECK(fds.empty());
}

TEST_CASE("acceptor: handshakes that do not finish in time are dropped", "[acceptor]") {
  Secret s = makeSecret(31);
  Acceptor acc(listenSocket(SockAddr::parse("127.0.0.1:0")), s, LinkKind::Data, std::chrono::milliseconds(200),
               log::kNet);
  Fd silent = blockingConnect(acc.address());
  Fd partial = blockingConnect(acc.address());
  uint8_t hello[40];
  putHeader(hello, kProtocolVersion, static_cast<uint16_t>(LinkKind::Data));
  unit::rawWrite(partial.get(), hello, 20);  // half a hello, then nothing
  std::vector<Acceptor::Accepted> out;
  unit::Guard g;
  // Only a guard: the acceptor drops them after its own 200 ms deadline.
  while (acc.rejected() < 2) {
    REQUIRE(!g.expired());
    acc.advance(out);
    std::vector<pollfd> fds;
    acc.addPollFds(fds);
    ::poll(fds.data(), fds.size(), 20);
  }
  CHECK(acc.rejected() == 2);
  CHECK(out.empty());
  for (int fd : {silent.get(), partial.get()}) {
    unit::Guard g2;
    char c;
    ssize_t r;
    while ((r = ::recv(fd, &c, 1, MSG_DONTWAIT)) < 0 && errno == EAGAIN && !g2.expired()) {
      pollfd p{fd, POLLIN, 0};
      ::poll(&p, 1, 100);
    }
    CHECK(r == 0);  // closed by the acceptor
  }
  std::vector<pollfd> fds;
  acc.addPollFds(fds);
  CHECK(fds.size() == 1);  // only the listener
}

TEST_CASE("acceptor: a silent client does not hold up the others", "[acceptor]") {
  // With a long handshake timeout the silent client stays pending, and good clients that
  // come after it are all accepted meanwhile.
  Secret s = makeSecret(21);
  Acceptor acc(listenSocket(SockAddr::parse("127.0.0.1:0")), s, LinkKind::Bootstrap,
               std::chrono::milliseconds(600000), log::kBootstrap);
  Fd silent = blockingConnect(acc.address());
  const int n = 5;
  std::vector<Fd> fds;
  std::vector<std::unique_ptr<Handshake>> hs;
  std::vector<Payload> ps;
  for (int i = 0; i < n; ++i) {
    fds.push_back(blockingConnect(acc.address()));
    ps.push_back(makePayload(static_cast<uint32_t>(100 + i)));
  }
  for (int i = 0; i < n; ++i)
    hs.push_back(std::make_unique<Handshake>(Handshake::Role::Client, fds[i].get(), s, LinkKind::Bootstrap, ps[i].b));
  std::vector<Acceptor::Accepted> out;
  std::vector<bool> done(n, false);
  unit::Guard g;
  auto allDone = [&] {
    for (bool d : done)
      if (!d) return false;
    return true;
  };
  while (!(allDone() && out.size() == static_cast<size_t>(n))) {
    REQUIRE(!g.expired());
    acc.advance(out);
    for (int i = 0; i < n; ++i)
      if (!done[i]) done[i] = hs[i]->step();
    std::vector<pollfd> pf;
    acc.addPollFds(pf);
    ::poll(pf.data(), pf.size(), 10);
  }
  CHECK(acc.rejected() == 0);
  std::vector<bool> seen(n, false);
  for (const auto& a : out)
    for (int i = 0; i < n; ++i)
      if (memcmp(a.payload, ps[i].b, kHandshakePayloadBytes) == 0) seen[i] = true;
  CHECK(std::all_of(seen.begin(), seen.end(), [](bool b) { return b; }));
  // The silent one is still pending: the listener plus it are polled.
  std::vector<pollfd> pf;
  acc.addPollFds(pf);
  CHECK(pf.size() == 2);
}
