// Tests of the connection handshake (base/handshake.h) over socket pairs, against real peers
// and hand-made hostile ones. The Acceptor is tested in test_acceptor.cc.
#include <poll.h>
#include <sodium.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <exception>
#include <memory>
#include <thread>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "base/error.h"
#include "base/handshake.h"
#include "base/socket.h"
#include "base/wait.h"
#include "unit_handshake.h"
#include "unit_net.h"

using namespace hora;
using namespace unit;

namespace {

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

