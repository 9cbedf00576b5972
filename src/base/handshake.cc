#include "base/handshake.h"

#include <sodium.h>

#include <cstring>
#include <mutex>

#include "base/error.h"
#include "base/wait.h"

namespace hora {

namespace {
constexpr uint32_t kMagic = 0x48524853;  // "HRHS"
constexpr size_t kHeader = 8;            // magic u32, version u16, kind u16
constexpr size_t kHelloBytes = kHeader + 32;
constexpr size_t kChallengeBytes = kHeader + 32 + crypto_auth_hmacsha256_BYTES;
constexpr size_t kResponseBytes = kHeader + crypto_auth_hmacsha256_BYTES + kHandshakePayloadBytes;
constexpr size_t kAcceptBytes = 8;  // magic u32, status u32
static_assert(kResponseBytes <= 160, "buffer too small");

void initSodium() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (sodium_init() < 0) fail(Errc::System, "libsodium failed to initialise");
  });
}

void putHeader(uint8_t* p, LinkKind kind) {
  uint32_t m = kMagic;
  uint16_t v = kProtocolVersion, k = static_cast<uint16_t>(kind);
  memcpy(p, &m, 4);
  memcpy(p + 4, &v, 2);
  memcpy(p + 6, &k, 2);
}

const char* kindName(uint16_t k) {
  switch (k) {
    case 1: return "bootstrap";
    case 2: return "data";
    case 3: return "shared-memory";
    default: return "unknown";
  }
}

void checkHeader(const uint8_t* p, LinkKind kind) {
  uint32_t m;
  uint16_t v, k;
  memcpy(&m, p, 4);
  memcpy(&v, p + 4, 2);
  memcpy(&k, p + 6, 2);
  if (m != kMagic) fail(Errc::Remote, "handshake: not a Hora peer (bad magic 0x%08x)", m);
  if (v != kProtocolVersion)
    fail(Errc::Remote, "handshake: peer speaks protocol version %u, this library %u", v,
         kProtocolVersion);
  if (k != static_cast<uint16_t>(kind))
    fail(Errc::Remote, "handshake: peer opened a %s link where a %s link was expected", kindName(k),
         kindName(static_cast<uint16_t>(kind)));
}

void mac(uint8_t out[crypto_auth_hmacsha256_BYTES], const Secret& s, const char* label,
         LinkKind kind, const uint8_t* a, const uint8_t* b, const uint8_t* payload) {
  crypto_auth_hmacsha256_state st;
  crypto_auth_hmacsha256_init(&st, s.bytes, kSecretBytes);
  crypto_auth_hmacsha256_update(&st, reinterpret_cast<const unsigned char*>(label), strlen(label));
  uint16_t k = static_cast<uint16_t>(kind);
  crypto_auth_hmacsha256_update(&st, reinterpret_cast<const unsigned char*>(&k), 2);
  crypto_auth_hmacsha256_update(&st, a, 32);
  crypto_auth_hmacsha256_update(&st, b, 32);
  if (payload) crypto_auth_hmacsha256_update(&st, payload, kHandshakePayloadBytes);
  crypto_auth_hmacsha256_final(&st, out);
}
}  // namespace

void randomBytes(void* buf, size_t n) {
  initSodium();
  randombytes_buf(buf, n);
}

Handshake::Handshake(Role role, int fd, const Secret& secret, LinkKind kind, const void* payload)
    : role_(role), fd_(fd), secret_(secret), kind_(kind) {
  initSodium();
  memset(payload_, 0, sizeof payload_);
  if (payload) memcpy(payload_, payload, kHandshakePayloadBytes);
  if (role == Role::Client) {
    randomBytes(clientNonce_, 32);
    buildHello();
  } else {
    randomBytes(serverNonce_, 32);
    state_ = State::RecvHello;
    want_ = kHelloBytes;
    done_ = 0;
  }
}

void Handshake::buildHello() {
  putHeader(buf_, kind_);
  memcpy(buf_ + kHeader, clientNonce_, 32);
  state_ = State::SendHello;
  want_ = kHelloBytes;
  done_ = 0;
}

void Handshake::buildChallenge() {
  putHeader(buf_, kind_);
  memcpy(buf_ + kHeader, serverNonce_, 32);
  mac(buf_ + kHeader + 32, secret_, "hora-server", kind_, clientNonce_, serverNonce_, nullptr);
  state_ = State::SendChallenge;
  want_ = kChallengeBytes;
  done_ = 0;
}

void Handshake::buildResponse() {
  putHeader(buf_, kind_);
  mac(buf_ + kHeader, secret_, "hora-client", kind_, serverNonce_, clientNonce_, payload_);
  memcpy(buf_ + kHeader + crypto_auth_hmacsha256_BYTES, payload_, kHandshakePayloadBytes);
  state_ = State::SendResponse;
  want_ = kResponseBytes;
  done_ = 0;
}

void Handshake::checkChallenge() {
  checkHeader(buf_, kind_);
  memcpy(serverNonce_, buf_ + kHeader, 32);
  uint8_t expect[crypto_auth_hmacsha256_BYTES];
  mac(expect, secret_, "hora-server", kind_, clientNonce_, serverNonce_, nullptr);
  if (sodium_memcmp(expect, buf_ + kHeader + 32, sizeof expect) != 0)
    fail(Errc::Remote, "handshake: the server does not know this job's secret (wrong unique id?)");
}

void Handshake::checkResponse() {
  checkHeader(buf_, kind_);
  memcpy(payload_, buf_ + kHeader + crypto_auth_hmacsha256_BYTES, kHandshakePayloadBytes);
  uint8_t expect[crypto_auth_hmacsha256_BYTES];
  mac(expect, secret_, "hora-client", kind_, serverNonce_, clientNonce_, payload_);
  if (sodium_memcmp(expect, buf_ + kHeader, sizeof expect) != 0)
    fail(Errc::Remote, "handshake: the client does not know this job's secret (wrong unique id?)");
}

void Handshake::checkAccept() {
  uint32_t m, status;
  memcpy(&m, buf_, 4);
  memcpy(&status, buf_ + 4, 4);
  if (m != kMagic || status != 0) fail(Errc::Remote, "handshake: the server refused the connection");
}

bool Handshake::sending() const {
  return state_ == State::SendHello || state_ == State::SendResponse ||
         state_ == State::SendChallenge || state_ == State::SendAccept;
}

short Handshake::events() const { return sending() ? POLLOUT : POLLIN; }

bool Handshake::step() {
  while (state_ != State::Done) {
    size_t n = sending() ? writeSome(fd_, buf_ + done_, want_ - done_, "handshake peer")
                         : readSome(fd_, buf_ + done_, want_ - done_, "handshake peer");
    if (n == 0) return false;
    done_ += n;
    if (done_ < want_) continue;
    done_ = 0;
    switch (state_) {
      case State::SendHello:
        state_ = State::RecvChallenge;
        want_ = kChallengeBytes;
        break;
      case State::RecvChallenge:
        checkChallenge();
        buildResponse();
        break;
      case State::SendResponse:
        state_ = State::RecvAccept;
        want_ = kAcceptBytes;
        break;
      case State::RecvAccept:
        checkAccept();
        state_ = State::Done;
        break;
      case State::RecvHello:
        checkHeader(buf_, kind_);
        memcpy(clientNonce_, buf_ + kHeader, 32);
        buildChallenge();
        break;
      case State::SendChallenge:
        state_ = State::RecvResponse;
        want_ = kResponseBytes;
        break;
      case State::RecvResponse: {
        checkResponse();
        uint32_t m = kMagic, ok = 0;
        memcpy(buf_, &m, 4);
        memcpy(buf_ + 4, &ok, 4);
        state_ = State::SendAccept;
        want_ = kAcceptBytes;
        break;
      }
      case State::SendAccept:
        state_ = State::Done;
        break;
      case State::Done:
        break;
    }
  }
  return true;
}

void clientHandshake(int fd, const Secret& secret, LinkKind kind, const void* payload, Waiter& w,
                     const char* who) {
  Handshake hs(Handshake::Role::Client, fd, secret, kind, payload);
  (void)who;
  while (!hs.step()) {
    w.idle([&](milliseconds most) {
      pollfd p{fd, hs.events(), 0};
      pollFor(&p, 1, static_cast<int>(most.count()));
    });
  }
  w.progressed();
}

}  // namespace hora
