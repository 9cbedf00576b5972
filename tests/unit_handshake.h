// Helpers shared by the tests of the connection handshake (test_handshake.cc) and of the
// Acceptor (test_acceptor.cc): secrets and payloads, the wire format as documented in
// handshake.h for the hand-made peers, and the outcome of running a handshake.
#pragma once
#include <sodium.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/handshake.h"
#include "unit_net.h"

namespace unit {

inline hora::Secret makeSecret(uint8_t seed) {
  hora::Secret s;
  for (size_t i = 0; i < hora::kSecretBytes; ++i) s.bytes[i] = static_cast<uint8_t>(seed * 31 + i * 7 + 1);
  return s;
}

struct Payload {
  uint8_t b[hora::kHandshakePayloadBytes];
};
inline Payload makePayload(uint32_t id) {
  Payload p;
  std::vector<uint8_t> v = pattern(hora::kHandshakePayloadBytes, id);
  memcpy(p.b, v.data(), sizeof p.b);
  return p;
}

// The wire format, as documented in handshake.h, for the hand-made peers.
inline constexpr uint32_t kHsMagic = 0x48524853;  // "HRHS"
inline constexpr size_t kMac = 32;
inline void putHeader(uint8_t* p, uint16_t version, uint16_t kind, uint32_t magic = kHsMagic) {
  memcpy(p, &magic, 4);
  memcpy(p + 4, &version, 2);
  memcpy(p + 6, &kind, 2);
}
inline void hmac(uint8_t out[kMac], const hora::Secret& s, const char* label, uint16_t kind, const uint8_t* a,
                 const uint8_t* b, const uint8_t* payload) {
  crypto_auth_hmacsha256_state st;
  crypto_auth_hmacsha256_init(&st, s.bytes, hora::kSecretBytes);
  crypto_auth_hmacsha256_update(&st, reinterpret_cast<const unsigned char*>(label), strlen(label));
  crypto_auth_hmacsha256_update(&st, reinterpret_cast<const unsigned char*>(&kind), 2);
  crypto_auth_hmacsha256_update(&st, a, 32);
  crypto_auth_hmacsha256_update(&st, b, 32);
  if (payload) crypto_auth_hmacsha256_update(&st, payload, hora::kHandshakePayloadBytes);
  crypto_auth_hmacsha256_final(&st, out);
}

struct Outcome {
  bool done = false;
  bool threw = false;
  hora::Errc code = hora::Errc::Success;
  std::string what;
};

}  // namespace unit
