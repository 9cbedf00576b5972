// The connection handshake (src/base/handshake.h), either end, against a peer over a socket
// pair. The first byte picks the end under test, its link kind and the kind the peer claims;
// the second the peer:
//   - a peer that knows the secret and plays the protocol, with each of its two messages
//     altered as the input says (bytes flipped, written in pieces, cut short by a close);
//   - raw bytes: the rest of the input, then a close.
//
// Invariants: the handshake completes exactly when the peer played the protocol unaltered with
// the same kind, and then the server holds the client's payload; otherwise step() throws
// hora::Error (Errc::Remote) with a text, never anything else; raw bytes never complete it
// (they cannot know the secret); and the client's own messages are valid (its response's MAC
// verifies and carries its payload).
#include <sodium.h>
#include <sys/socket.h>

#include <cstring>
#include <string>
#include <vector>

#include "base/handshake.h"
#include "fuzz.h"
#include "unit_handshake.h"

using hora::Handshake;
using hora::LinkKind;

namespace {

// The handshake's nonces come from libsodium's random source: a counter here, reset for each
// input, so that a reproducer replays exactly.
uint64_t gCounter = 0;
void fakeBuf(void* const buf, const size_t n) {
  auto* p = static_cast<uint8_t*>(buf);
  for (size_t i = 0; i < n; ++i) p[i] = static_cast<uint8_t>((++gCounter * 0x9e3779b97f4a7c15ull) >> 56);
}
uint32_t fakeRandom() {
  uint32_t v;
  fakeBuf(&v, sizeof v);
  return v;
}
const char* fakeName() { return "fuzz-counter"; }
randombytes_implementation gFake = {fakeName, fakeRandom, nullptr, nullptr, fakeBuf, nullptr};

constexpr size_t kHello = 8 + 32, kChallenge = 8 + 32 + 32, kResponse = 8 + 32 + 64, kAccept = 8;

enum class Outcome { Waiting, Done, Failed };

Outcome advance(Handshake& hs) {
  Outcome o = Outcome::Failed;
  fuzz::returnsOrFails([&] { o = hs.step() ? Outcome::Done : Outcome::Waiting; }, hora::Errc::Remote);
  return o;
}

// Reads what the end under test has written so far, at most n bytes.
std::string drain(int fd, size_t n) {
  std::string s(n, '\0');
  size_t got = 0;
  while (got < n) {
    ssize_t r = ::recv(fd, &s[got], n - got, MSG_DONTWAIT);
    if (r <= 0) break;
    got += static_cast<size_t>(r);
  }
  s.resize(got);
  return s;
}

// How the peer alters one message: flipped bytes, the size of its pieces, and where a close
// cuts it short (at or past its end: not at all).
struct Alteration {
  std::vector<std::pair<size_t, uint8_t>> flips;
  size_t len = 0, piece = 0, cut = 0;

  static Alteration read(fuzz::Input& in, size_t len) {
    Alteration a;
    a.len = len;
    const uint8_t n = in.u8() % 4;
    for (uint8_t i = 0; i < n; ++i) {
      const uint8_t pos = in.u8(), x = in.u8();
      a.flips.emplace_back(pos % len, x);
    }
    const uint8_t p = in.u8();
    a.piece = p == 0 ? len : 1 + p % len;
    const uint8_t c = in.u8();
    a.cut = c >= 0x80 ? c % len : len;
    return a;
  }
};

// Writes msg as the alteration says, stepping the handshake after each piece; *sent is what
// went out, and *altered is set when that is not msg. Returns false when the handshake has
// finished (done or failed) or the peer closed.
bool play(int fd, Handshake& hs, const std::string& original, const Alteration& a, Outcome* o, bool* altered,
          std::string* sent = nullptr) {
  std::string msg = original;
  for (auto& f : a.flips) msg[f.first] = static_cast<char>(msg[f.first] ^ f.second);
  const size_t end = std::min(a.cut, msg.size());
  if (sent) *sent = msg.substr(0, end);
  if (msg.substr(0, end) != original) *altered = true;
  for (size_t off = 0; off < end;) {
    const size_t n = std::min(a.piece, end - off);
    unit::rawWrite(fd, msg.data() + off, n);
    off += n;
    *o = advance(hs);
    if (*o != Outcome::Waiting) return false;
  }
  if (end < msg.size()) {
    ::shutdown(fd, SHUT_WR);
    *o = advance(hs);
    return false;
  }
  return true;
}

std::string header(uint16_t kind) {
  std::string h(8, '\0');
  unit::putHeader(reinterpret_cast<uint8_t*>(&h[0]), hora::kProtocolVersion, kind);
  return h;
}

std::string mac(const hora::Secret& s, const char* label, uint16_t kind, const uint8_t* a, const uint8_t* b,
                const uint8_t* payload) {
  std::string m(unit::kMac, '\0');
  unit::hmac(reinterpret_cast<uint8_t*>(&m[0]), s, label, kind, a, b, payload);
  return m;
}

const uint8_t* u8p(const std::string& s, size_t off = 0) { return reinterpret_cast<const uint8_t*>(s.data()) + off; }

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  randombytes_set_implementation(&gFake);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  gCounter = 0;
  fuzz::Input in(data, size);
  const uint8_t how = in.u8(), peerHow = in.u8();
  const bool server = (how & 1) == 0;
  const uint16_t kind = static_cast<uint16_t>(1 + (how >> 1 & 3) % 3);
  const uint16_t claimed = (how >> 3 & 3) == 0 ? kind : static_cast<uint16_t>(how >> 3 & 3);
  const bool raw = (peerHow & 1) != 0;

  const hora::Secret secret = unit::makeSecret(7);
  const unit::Payload mine = unit::makePayload(11);
  auto [a, b] = unit::socketPair();
  const int peer = b.get();
  Handshake hs(server ? Handshake::Role::Server : Handshake::Role::Client, a.get(), secret,
               static_cast<LinkKind>(kind), server ? nullptr : mine.b);
  Outcome o = Outcome::Waiting;

  if (raw) {
    const std::string bytes = in.rest();
    if (!server) o = advance(hs);  // the client speaks first
    if (o == Outcome::Waiting) {
      unit::rawWrite(peer, bytes.data(), bytes.size());
      ::shutdown(peer, SHUT_WR);
      for (int i = 0; i < 8 && o == Outcome::Waiting; ++i) {
        o = advance(hs);
        drain(peer, 4096);
      }
    }
    FUZZ_CHECK(o != Outcome::Done, "a handshake completed with a peer that does not know the secret");
    return 0;
  }

  Alteration first = Alteration::read(in, server ? kHello : kChallenge);
  Alteration second = Alteration::read(in, server ? kResponse : kAccept);
  bool altered = claimed != kind;
  if (server) {
    // The peer is a client: Hello, then Response to the server's Challenge.
    const std::string clientNonce(32, '\x5a');
    std::string hello;
    bool on = play(peer, hs, header(claimed) + clientNonce, first, &o, &altered, &hello);
    if (on) {
      const std::string challenge = drain(peer, kChallenge);
      FUZZ_CHECK(hello.substr(0, 8) == header(kind), "the server answered a hello with a bad header");
      FUZZ_CHECK(challenge.size() == kChallenge, "the server sent no complete challenge");
      const std::string serverNonce = challenge.substr(8, 32);
      // Over the nonce the server received, which the peer may have altered.
      FUZZ_CHECK(challenge.substr(40) == mac(secret, "hora-server", kind, u8p(hello, 8), u8p(serverNonce), nullptr),
                 "the server's challenge does not prove the secret");
      const std::string payload(reinterpret_cast<const char*>(mine.b), sizeof mine.b);
      on = play(peer, hs,
                header(claimed) + mac(secret, "hora-client", claimed, u8p(serverNonce), u8p(clientNonce), mine.b) +
                    payload,
                second, &o, &altered);
    }
    if (o == Outcome::Done) {
      FUZZ_CHECK(!altered, "the server accepted an altered handshake");
      FUZZ_CHECK(memcmp(hs.peerPayload(), mine.b, sizeof mine.b) == 0, "the server holds another payload");
      const std::string accept = drain(peer, kAccept);
      FUZZ_CHECK(accept.size() == kAccept && accept.substr(4) == std::string(4, '\0'), "no accept after success");
    }
  } else {
    // The peer is a server: Challenge to the client's Hello, then Accept after its Response.
    o = advance(hs);
    FUZZ_CHECK(o == Outcome::Waiting);
    const std::string hello = drain(peer, kHello);
    FUZZ_CHECK(hello.size() == kHello && hello.substr(0, 8) == header(kind), "the client's hello is malformed");
    const std::string clientNonce = hello.substr(8);
    const std::string serverNonce(32, '\x3c');
    bool on = play(peer, hs,
                   header(claimed) + serverNonce +
                       mac(secret, "hora-server", claimed, u8p(clientNonce), u8p(serverNonce), nullptr),
                   first, &o, &altered);
    if (on) {
      FUZZ_CHECK(!altered, "the client answered an altered challenge");
      const std::string response = drain(peer, kResponse);
      FUZZ_CHECK(response.size() == kResponse && response.substr(0, 8) == header(kind),
                 "the client sent no complete response");
      FUZZ_CHECK(response.substr(40) == std::string(reinterpret_cast<const char*>(mine.b), sizeof mine.b),
                 "the client's response carries another payload");
      FUZZ_CHECK(response.substr(8, 32) ==
                     mac(secret, "hora-client", kind, u8p(serverNonce), u8p(clientNonce), mine.b),
                 "the client's response does not prove the secret");
      uint32_t m = unit::kHsMagic, ok = 0;
      std::string accept(8, '\0');
      memcpy(&accept[0], &m, 4);
      memcpy(&accept[4], &ok, 4);
      play(peer, hs, accept, second, &o, &altered);
    }
  }
  if (!altered) FUZZ_CHECK(o == Outcome::Done, "an unaltered handshake failed");
  else FUZZ_CHECK(o == Outcome::Failed, "an altered handshake neither failed nor completed");
  return 0;
}
