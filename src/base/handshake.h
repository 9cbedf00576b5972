// The challenge-response handshake that opens every connection, bootstrap or data.
//
// Both ends hold a 32-byte secret (from the unique id). Nothing secret crosses the wire:
//
//   client -> server  Hello     magic, version, kind, client nonce (32 random bytes)
//   server -> client  Challenge magic, version, kind, server nonce,
//                               HMAC(secret, "hora-server" kind client-nonce server-nonce)
//   client -> server  Response  magic, version, kind,
//                               HMAC(secret, "hora-client" kind server-nonce client-nonce payload),
//                               payload (64 bytes the server learns authenticated: rank, ...)
//   server -> client  Accept    magic, status
//
// The server proves it knows the secret before the client sends anything else; the client's
// proof covers its payload, so a connection cannot be replayed or redirected. HMAC-SHA-256
// comes from libsodium. Every message is fixed-size and its magic, version and kind are checked
// before anything else in it is used. A failure closes the connection: a server logs it and
// carries on with its other connections.
//
// The state machine never blocks: step() moves what the socket allows now.
#pragma once
#include <chrono>
#include <cstdint>
#include <string>

#include "base/socket.h"

namespace hora {

inline constexpr size_t kSecretBytes = 32;
inline constexpr size_t kHandshakePayloadBytes = 64;
inline constexpr uint16_t kProtocolVersion = 2;  // 2: frames carry the call number

struct Secret {
  uint8_t bytes[kSecretBytes];
};

// What a link is for (it separates the acceptors of one job): the rendezvous, a data link
// between two ranks, or a link between ranks of one host that swaps descriptors.
enum class LinkKind : uint16_t { Bootstrap = 1, Data = 2, Local = 3 };

// Fills buf with bytes from the kernel's random source (libsodium).
void randomBytes(void* buf, size_t n);

class Handshake {
 public:
  enum class Role { Client, Server };
  enum class State {
    SendHello, RecvChallenge, SendResponse, RecvAccept,   // client
    RecvHello, SendChallenge, RecvResponse, SendAccept,   // server
    Done,
  };

  // A client sends `payload` (kHandshakePayloadBytes); a server receives one.
  Handshake(Role role, int fd, const Secret& secret, LinkKind kind, const void* payload = nullptr);

  // Moves as far as the socket allows without blocking. Returns true when done; throws
  // hora::Error (Errc::Remote) with the reason when the peer is not a Hora peer with our secret.
  bool step();
  // POLLIN or POLLOUT: what step() is waiting for.
  short events() const;
  State state() const { return state_; }
  const uint8_t* peerPayload() const { return payload_; }

 private:
  struct Wire;
  void buildHello();
  void buildChallenge();
  void buildResponse();
  void checkChallenge();
  void checkResponse();
  void checkAccept();
  bool sending() const;

  Role role_;
  int fd_;
  Secret secret_;
  LinkKind kind_;
  State state_;
  uint8_t clientNonce_[32];
  uint8_t serverNonce_[32];
  uint8_t payload_[kHandshakePayloadBytes];
  uint8_t buf_[160];
  size_t want_ = 0;  // bytes of the current message
  size_t done_ = 0;  // bytes of it moved so far
};

// Runs a client handshake to completion with a waiter.
void clientHandshake(int fd, const Secret& secret, LinkKind kind, const void* payload, Waiter& w,
                     const char* who);

}  // namespace hora
