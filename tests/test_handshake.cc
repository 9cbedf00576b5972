// Tests of the connection handshake (base/handshake.h) over socket pairs, against real peers
// and hand-made hostile ones, and of the Acceptor (base/acceptor.h) on a loopback listener
// with good, silent, garbage and wrong-secret clients at once.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sodium.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <exception>
#include <memory>
#include <thread>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "base/acceptor.h"
#include "base/error.h"
#include "base/handshake.h"
#include "base/log.h"
#include "base/socket.h"
#include "unit_net.h"

using namespace hora;

namespace {

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

Secret makeSecret(uint8_t seed) {
  Secret s;
  for (size_t i = 0; i < kSecretBytes; ++i) s.bytes[i] = static_cast<uint8_t>(seed * 31 + i * 7 + 1);
  return s;
}

struct Payload {
  uint8_t b[kHandshakePayloadBytes];
};
Payload makePayload(uint32_t id) {
  Payload p;
  std::vector<uint8_t> v = unit::pattern(kHandshakePayloadBytes, id);
  memcpy(p.b, v.data(), sizeof p.b);
  return p;
}

// The wire format, as documented in handshake.h, for the hand-made peers.
constexpr uint32_t kHsMagic = 0x48524853;  // "HRHS"
constexpr size_t kMac = 32;
void putHeader(uint8_t* p, uint16_t version, uint16_t kind, uint32_t magic = kHsMagic) {
  memcpy(p, &magic, 4);
  memcpy(p + 4, &version, 2);
  memcpy(p + 6, &kind, 2);
}
void hmac(uint8_t out[kMac], const Secret& s, const char* label, uint16_t kind, const uint8_t* a,
          const uint8_t* b, const uint8_t* payload) {
  crypto_auth_hmacsha256_state st;
  crypto_auth_hmacsha256_init(&st, s.bytes, kSecretBytes);
  crypto_auth_hmacsha256_update(&st, reinterpret_cast<const unsigned char*>(label), strlen(label));
  crypto_auth_hmacsha256_update(&st, reinterpret_cast<const unsigned char*>(&kind), 2);
  crypto_auth_hmacsha256_update(&st, a, 32);
  crypto_auth_hmacsha256_update(&st, b, 32);
  if (payload) crypto_auth_hmacsha256_update(&st, payload, kHandshakePayloadBytes);
  crypto_auth_hmacsha256_final(&st, out);
}

struct Outcome {
  bool done = false;
  bool threw = false;
  Errc code = Errc::Success;
  std::string what;
};

// Steps both handshakes until both are done or one throws; polls when neither moves. The other
// side's outcome is left as it was (not done) when one side throws.
void drive(Handshake* client, Handshake* server, Outcome& co, Outcome& so) {
  unit::Guard g;
  auto stepOne = [](Handshake* h, Outcome& o) {
    if (!h || o.done || o.threw) return;
    try {
      o.done = h->step();
    } catch (const Error& e) {
      o.threw = true;
      o.code = e.code();
      o.what = e.what();
    }
  };
  for (;;) {
    stepOne(client, co);
    stepOne(server, so);
    bool cEnd = !client || co.done || co.threw, sEnd = !server || so.done || so.threw;
    if ((cEnd && sEnd) || co.threw || so.threw) return;
    if (g.expired()) throw std::runtime_error("test guard expired: handshake hangs");
    ::poll(nullptr, 0, 1);
  }
}

// Steps one handshake until done or it throws, polling its fd.
Outcome runAlone(Handshake& h, int fd) {
  Outcome o;
  unit::Guard g;
  for (;;) {
    try {
      if (h.step()) {
        o.done = true;
        return o;
      }
    } catch (const Error& e) {
      o.threw = true;
      o.code = e.code();
      o.what = e.what();
      return o;
    }
    if (g.expired()) throw std::runtime_error("test guard expired: handshake hangs");
    pollfd p{fd, h.events(), 0};
    ::poll(&p, 1, 100);
  }
}

}  // namespace

TEST_CASE("handshake: success and the server learns the client's payload", "[handshake]") {
  const LinkKind kind = GENERATE(LinkKind::Bootstrap, LinkKind::Data);
  auto [cfd, sfd] = unit::socketPair();
  Secret s = makeSecret(1);
  Payload p = makePayload(42);
  Handshake client(Handshake::Role::Client, cfd.get(), s, kind, p.b);
  Handshake server(Handshake::Role::Server, sfd.get(), s, kind);
  CHECK(client.events() == POLLOUT);
  CHECK(server.events() == POLLIN);
  Outcome co, so;
  drive(&client, &server, co, so);
  INFO(co.what << " / " << so.what);
  REQUIRE(co.done);
  REQUIRE(so.done);
  CHECK(client.state() == Handshake::State::Done);
  CHECK(server.state() == Handshake::State::Done);
  CHECK(memcmp(server.peerPayload(), p.b, kHandshakePayloadBytes) == 0);
  // The link is clean afterwards: nothing of the handshake is left in either direction.
  uint8_t x;
  CHECK(::recv(cfd.get(), &x, 1, MSG_DONTWAIT) < 0);
  CHECK(::recv(sfd.get(), &x, 1, MSG_DONTWAIT) < 0);
  // And it carries data.
  unit::rawWrite(cfd.get(), "ping", 4);
  char buf[4];
  unit::rawRead(sfd.get(), buf, 4);
  CHECK(memcmp(buf, "ping", 4) == 0);
}

TEST_CASE("handshake: runs of many payloads", "[handshake]") {
  for (uint32_t i = 0; i < 20; ++i) {
    auto [cfd, sfd] = unit::socketPair();
    Secret s = makeSecret(static_cast<uint8_t>(i));
    Payload p = makePayload(i);
    Handshake client(Handshake::Role::Client, cfd.get(), s, LinkKind::Data, p.b);
    Handshake server(Handshake::Role::Server, sfd.get(), s, LinkKind::Data);
    Outcome co, so;
    drive(&client, &server, co, so);
    REQUIRE(co.done);
    REQUIRE(so.done);
    CHECK(memcmp(server.peerPayload(), p.b, kHandshakePayloadBytes) == 0);
  }
}

TEST_CASE("handshake: the documented protocol is what goes over the wire", "[handshake]") {
  // A hand-made server following handshake.h's description completes a handshake with a real
  // client, so the format and the MACs are the documented ones.
  auto [cfd, sfd] = unit::socketPair();
  Secret s = makeSecret(3);
  Payload p = makePayload(5);
  const uint16_t kind = static_cast<uint16_t>(LinkKind::Data);
  Handshake client(Handshake::Role::Client, cfd.get(), s, LinkKind::Data, p.b);
  Outcome co;
  // Hello.
  uint8_t hello[8 + 32];
  {
    unit::Guard g;
    while (!client.step() && client.state() == Handshake::State::SendHello && !g.expired()) {
    }
  }
  unit::rawRead(sfd.get(), hello, sizeof hello);
  uint32_t m;
  uint16_t v, k;
  memcpy(&m, hello, 4);
  memcpy(&v, hello + 4, 2);
  memcpy(&k, hello + 6, 2);
  CHECK(m == kHsMagic);
  CHECK(v == kProtocolVersion);
  CHECK(k == kind);
  const uint8_t* clientNonce = hello + 8;

  SECTION("accepted") {
    uint8_t serverNonce[32];
    randombytes_buf(serverNonce, 32);
    uint8_t challenge[8 + 32 + kMac];
    putHeader(challenge, kProtocolVersion, kind);
    memcpy(challenge + 8, serverNonce, 32);
    hmac(challenge + 40, s, "hora-server", kind, clientNonce, serverNonce, nullptr);
    unit::rawWrite(sfd.get(), challenge, sizeof challenge);
    uint8_t response[8 + kMac + kHandshakePayloadBytes];
    {
      unit::Guard g;
      while (client.state() != Handshake::State::RecvAccept && !g.expired()) {
        client.step();
        ::poll(nullptr, 0, 1);
      }
    }
    unit::rawRead(sfd.get(), response, sizeof response);
    uint8_t expect[kMac];
    hmac(expect, s, "hora-client", kind, serverNonce, clientNonce, p.b);
    CHECK(memcmp(response + 8, expect, kMac) == 0);
    CHECK(memcmp(response + 8 + kMac, p.b, kHandshakePayloadBytes) == 0);

    SECTION("with status 0") {
      uint8_t accept[8] = {};
      memcpy(accept, &kHsMagic, 4);
      unit::rawWrite(sfd.get(), accept, 8);
      co = runAlone(client, cfd.get());
      CHECK(co.done);
    }
    SECTION("refused with a nonzero status") {
      uint8_t accept[8] = {};
      memcpy(accept, &kHsMagic, 4);
      accept[4] = 1;
      unit::rawWrite(sfd.get(), accept, 8);
      co = runAlone(client, cfd.get());
      REQUIRE(co.threw);
      CHECK(co.code == Errc::Remote);
      CHECK(contains(co.what, "refused"));
    }
  }
  SECTION("a server without the secret is detected by the client") {
    uint8_t challenge[8 + 32 + kMac];
    putHeader(challenge, kProtocolVersion, kind);
    randombytes_buf(challenge + 8, 32);
    hmac(challenge + 40, makeSecret(4), "hora-server", kind, clientNonce, challenge + 8, nullptr);
    unit::rawWrite(sfd.get(), challenge, sizeof challenge);
    co = runAlone(client, cfd.get());
    REQUIRE(co.threw);
    CHECK(co.code == Errc::Remote);
    CHECK(contains(co.what, "secret"));
    // The client sent nothing after its hello.
    uint8_t x;
    CHECK(::recv(sfd.get(), &x, 1, MSG_DONTWAIT) < 0);
  }
  SECTION("a server replying with another protocol version") {
    uint8_t challenge[8 + 32 + kMac];
    putHeader(challenge, kProtocolVersion + 1, kind);
    randombytes_buf(challenge + 8, 32);
    hmac(challenge + 40, s, "hora-server", kind, clientNonce, challenge + 8, nullptr);
    unit::rawWrite(sfd.get(), challenge, sizeof challenge);
    co = runAlone(client, cfd.get());
    REQUIRE(co.threw);
    CHECK(co.code == Errc::Remote);
    CHECK(contains(co.what, "version"));
  }
  SECTION("a server that closes mid-challenge") {
    uint8_t challenge[20] = {};
    putHeader(challenge, kProtocolVersion, kind);
    unit::rawWrite(sfd.get(), challenge, sizeof challenge);
    sfd.reset();
    co = runAlone(client, cfd.get());
    REQUIRE(co.threw);
    CHECK(co.code == Errc::Remote);
  }
}

TEST_CASE("handshake: wrong secret", "[handshake]") {
  SECTION("two real peers: the client detects it and the server never finishes") {
    auto [cfd, sfd] = unit::socketPair();
    Payload p = makePayload(1);
    Handshake client(Handshake::Role::Client, cfd.get(), makeSecret(1), LinkKind::Data, p.b);
    Handshake server(Handshake::Role::Server, sfd.get(), makeSecret(2), LinkKind::Data);
    Outcome co, so;
    drive(&client, &server, co, so);
    REQUIRE(co.threw);
    CHECK(co.code == Errc::Remote);
    CHECK(contains(co.what, "secret"));
    CHECK(!so.done);
    // The failed client goes away; the server then fails too, never reporting Done.
    cfd.reset();
    Outcome so2 = runAlone(server, sfd.get());
    CHECK(so2.threw);
    CHECK(!so2.done);
    CHECK(so2.code == Errc::Remote);
  }
  SECTION("a client that skips the check and answers with a bad MAC: the server detects it") {
    auto [cfd, sfd] = unit::socketPair();
    Secret s = makeSecret(1);
    const uint16_t kind = static_cast<uint16_t>(LinkKind::Data);
    Handshake server(Handshake::Role::Server, sfd.get(), s, LinkKind::Data);
    uint8_t hello[40];
    putHeader(hello, kProtocolVersion, kind);
    randombytes_buf(hello + 8, 32);
    unit::rawWrite(cfd.get(), hello, sizeof hello);
    Outcome so;
    {
      unit::Guard g;
      while (server.state() != Handshake::State::RecvResponse && !g.expired()) {
        server.step();
        ::poll(nullptr, 0, 1);
      }
    }
    uint8_t challenge[8 + 32 + kMac];
    unit::rawRead(cfd.get(), challenge, sizeof challenge);
    uint8_t response[8 + kMac + kHandshakePayloadBytes];
    putHeader(response, kProtocolVersion, kind);
    Payload p = makePayload(9);
    // The MAC with another secret (what a client with the wrong id would compute).
    hmac(response + 8, makeSecret(2), "hora-client", kind, challenge + 8, hello + 8, p.b);
    memcpy(response + 8 + kMac, p.b, kHandshakePayloadBytes);
    unit::rawWrite(cfd.get(), response, sizeof response);
    so = runAlone(server, sfd.get());
    REQUIRE(so.threw);
    CHECK(!so.done);
    CHECK(so.code == Errc::Remote);
    CHECK(contains(so.what, "secret"));
    // No Accept was sent.
    uint8_t x;
    CHECK(::recv(cfd.get(), &x, 1, MSG_DONTWAIT) < 0);
  }
  SECTION("a replayed response with the right secret but a tampered payload") {
    auto [cfd, sfd] = unit::socketPair();
    Secret s = makeSecret(1);
    const uint16_t kind = static_cast<uint16_t>(LinkKind::Data);
    Handshake server(Handshake::Role::Server, sfd.get(), s, LinkKind::Data);
    uint8_t hello[40];
    putHeader(hello, kProtocolVersion, kind);
    randombytes_buf(hello + 8, 32);
    unit::rawWrite(cfd.get(), hello, sizeof hello);
    {
      unit::Guard g;
      while (server.state() != Handshake::State::RecvResponse && !g.expired()) {
        server.step();
        ::poll(nullptr, 0, 1);
      }
    }
    uint8_t challenge[8 + 32 + kMac];
    unit::rawRead(cfd.get(), challenge, sizeof challenge);
    uint8_t response[8 + kMac + kHandshakePayloadBytes];
    putHeader(response, kProtocolVersion, kind);
    Payload p = makePayload(9);
    hmac(response + 8, s, "hora-client", kind, challenge + 8, hello + 8, p.b);
    p.b[0] ^= 1;  // the payload is covered by the MAC
    memcpy(response + 8 + kMac, p.b, kHandshakePayloadBytes);
    unit::rawWrite(cfd.get(), response, sizeof response);
    Outcome so = runAlone(server, sfd.get());
    REQUIRE(so.threw);
    CHECK(so.code == Errc::Remote);
  }
}

TEST_CASE("handshake: a server rejects what is not a Hora peer", "[handshake]") {
  auto [cfd, sfd] = unit::socketPair();
  Secret s = makeSecret(1);
  Handshake server(Handshake::Role::Server, sfd.get(), s, LinkKind::Data);
  Outcome so;
  SECTION("garbage bytes") {
    std::string junk = "GET / HTTP/1.1\r\nHost: example.org\r\n\r\n......";
    REQUIRE(junk.size() >= 40);
    unit::rawWrite(cfd.get(), junk.data(), junk.size());
    so = runAlone(server, sfd.get());
    REQUIRE(so.threw);
    CHECK(contains(so.what, "not a Hora peer"));
  }
  SECTION("a truncated hello, then close") {
    uint8_t hello[40];
    putHeader(hello, kProtocolVersion, static_cast<uint16_t>(LinkKind::Data));
    unit::rawWrite(cfd.get(), hello, 20);
    cfd.reset();
    so = runAlone(server, sfd.get());
    REQUIRE(so.threw);
    CHECK(contains(so.what, "closed"));
  }
  SECTION("a close before anything") {
    cfd.reset();
    so = runAlone(server, sfd.get());
    REQUIRE(so.threw);
  }
  SECTION("another protocol version") {
    uint8_t hello[40] = {};
    putHeader(hello, kProtocolVersion + 1, static_cast<uint16_t>(LinkKind::Data));
    unit::rawWrite(cfd.get(), hello, sizeof hello);
    so = runAlone(server, sfd.get());
    REQUIRE(so.threw);
    CHECK(contains(so.what, "version"));
  }
  SECTION("an unknown link kind") {
    uint8_t hello[40] = {};
    putHeader(hello, kProtocolVersion, 7);
    unit::rawWrite(cfd.get(), hello, sizeof hello);
    so = runAlone(server, sfd.get());
    REQUIRE(so.threw);
    CHECK(contains(so.what, "unknown"));
  }
  CHECK(so.code == Errc::Remote);
  CHECK(!so.done);
  CHECK(server.state() != Handshake::State::Done);
}

TEST_CASE("handshake: wrong link kind", "[handshake]") {
  const bool clientIsBootstrap = GENERATE(true, false);
  auto [cfd, sfd] = unit::socketPair();
  Secret s = makeSecret(1);
  Payload p = makePayload(1);
  LinkKind ck = clientIsBootstrap ? LinkKind::Bootstrap : LinkKind::Data;
  LinkKind sk = clientIsBootstrap ? LinkKind::Data : LinkKind::Bootstrap;
  Handshake client(Handshake::Role::Client, cfd.get(), s, ck, p.b);
  Handshake server(Handshake::Role::Server, sfd.get(), s, sk);
  Outcome co, so;
  drive(&client, &server, co, so);
  REQUIRE(so.threw);
  CHECK(so.code == Errc::Remote);
  CHECK(contains(so.what, clientIsBootstrap ? "bootstrap link where a data link" : "data link where a bootstrap link"));
  CHECK(!so.done);
  CHECK(!co.done);
}

TEST_CASE("handshake: clientHandshake with a waiter", "[handshake]") {
  auto [cfd, sfd] = unit::socketPair();
  Secret s = makeSecret(8);
  Payload p = makePayload(8);
  // The blocking client helper runs on a thread, the server's state machine on this one.
  Handshake server(Handshake::Role::Server, sfd.get(), s, LinkKind::Bootstrap);
  std::exception_ptr err;
  bool clientDone = false;
  std::thread t([&] {
    try {
      Waiter w(std::chrono::milliseconds(20000), nullptr, [] { return std::string("test"); });
      clientHandshake(cfd.get(), s, LinkKind::Bootstrap, p.b, w, "test server");
      clientDone = true;
    } catch (...) {
      err = std::current_exception();
    }
  });
  Outcome so = runAlone(server, sfd.get());
  t.join();
  CHECK(!err);
  CHECK(clientDone);
  REQUIRE(so.done);
  CHECK(memcmp(server.peerPayload(), p.b, kHandshakePayloadBytes) == 0);
}

// =============================================================================================
// Acceptor
// =============================================================================================

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
