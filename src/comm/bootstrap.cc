#include "comm/bootstrap.h"

#include <pthread.h>
#include <sodium.h>

#include <sys/socket.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <thread>

#include <unistd.h>

#include "base/acceptor.h"
#include "base/error.h"
#include "base/log.h"
#include "comm/bootstrap_wire.h"

namespace hora {

using namespace bootstrap_wire;

namespace {
constexpr uint32_t kIdMagic = 0x44495248;  // "HRID"
}  // namespace

// ---- the unique id ------------------------------------------------------------------------

void UniqueId::encode(uint8_t out[kUniqueIdBytes]) const {
  memset(out, 0, kUniqueIdBytes);
  memcpy(out, &kIdMagic, 4);
  uint16_t v = kProtocolVersion;
  memcpy(out + 4, &v, 2);
  root.pack(out + 8);
  memcpy(out + 8 + SockAddr::kPackedBytes, secret.bytes, kSecretBytes);
}

UniqueId UniqueId::decode(const uint8_t in[kUniqueIdBytes]) {
  uint32_t magic;
  uint16_t version;
  memcpy(&magic, in, 4);
  memcpy(&version, in + 4, 2);
  if (magic != kIdMagic)
    fail(Errc::InvalidArgument, "not a Hora unique id (bad magic); was it made by horaGetUniqueId?");
  if (version != kProtocolVersion)
    fail(Errc::InvalidArgument, "the unique id is of protocol version %u, this library speaks %u",
         version, kProtocolVersion);
  UniqueId id;
  if (!SockAddr::unpack(in + 8, &id.root) || id.root.port() == 0)
    fail(Errc::InvalidArgument, "the unique id holds no valid rendezvous address");
  memcpy(id.secret.bytes, in + 8 + SockAddr::kPackedBytes, kSecretBytes);
  return id;
}

std::string UniqueId::hex() const {
  uint8_t raw[kUniqueIdBytes];
  encode(raw);
  static const char* digits = "0123456789abcdef";
  std::string s;
  for (uint8_t b : raw) {
    s += digits[b >> 4];
    s += digits[b & 15];
  }
  return s;
}

UniqueId UniqueId::fromHex(const std::string& hex) {
  if (hex.size() != 2 * kUniqueIdBytes)
    fail(Errc::InvalidArgument, "this unique id in hex has %zu digits, not %zu", hex.size(), 2 * kUniqueIdBytes);
  uint8_t raw[kUniqueIdBytes];
  for (size_t i = 0; i < kUniqueIdBytes; ++i) {
    auto nib = [&](char c) -> int {
      if (c >= '0' && c <= '9') return c - '0';
      if (c >= 'a' && c <= 'f') return c - 'a' + 10;
      if (c >= 'A' && c <= 'F') return c - 'A' + 10;
      fail(Errc::InvalidArgument, "a unique id in hex holds a non-hex character '%c'", c);
    };
    raw[i] = static_cast<uint8_t>(nib(hex[2 * i]) << 4 | nib(hex[2 * i + 1]));
  }
  return decode(raw);
}

uint64_t UniqueId::commId() const {
  uint8_t h[16];
  crypto_generichash(h, sizeof h, secret.bytes, kSecretBytes, nullptr, 0);
  uint64_t v;
  memcpy(&v, h, 8);
  return v;
}

// ---- a rank's side -----------------------------------------------------------------------

BootstrapClient::BootstrapClient(const UniqueId& id, int rank, int nranks, Waiter& w)
    : rank_(rank), nranks_(nranks) {
  installForkHandler();
  fd_ = connectWithRetry(id.root, w);
  uint8_t payload[kHandshakePayloadBytes] = {0};
  HelloPayload h{};
  h.rank = static_cast<uint32_t>(rank);
  h.nranks = static_cast<uint32_t>(nranks);
  h.pid = static_cast<uint32_t>(getpid());
  strncpy(h.host, log::hostName(), sizeof h.host - 1);
  memcpy(payload, &h, sizeof h);
  try {
    clientHandshake(fd_.get(), id.secret, LinkKind::Bootstrap, payload, w, "the rendezvous");
  } catch (const Error& e) {
    fail(e.code(), "joining the rendezvous at %s: %s", id.root.str().c_str(), e.what());
  }
}

BootstrapClient::~BootstrapClient() = default;

SockAddr BootstrapClient::localAddress() const { return hora::localAddress(fd_.get()); }

void BootstrapClient::close() { fd_.reset(); }

void BootstrapClient::finish(Waiter& w) {
  std::string f = frame(FrameType::Bye, std::string());
  writeAll(fd_.get(), f.data(), f.size(), w, "the rendezvous");
  fd_.reset();
}

void BootstrapClient::tellRoot(const std::string& why, bool gaveUp) noexcept {
  std::string f = frame(gaveUp ? FrameType::GaveUp : FrameType::Error, why.substr(0, 1024));
  (void)::send(fd_.get(), f.data(), f.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
}

void BootstrapClient::abandon(const std::string& why) noexcept {
  if (!fd_.valid()) return;
  tellRoot(why);
  fd_.reset();
}

void BootstrapClient::giveUp(const std::string& why, milliseconds most) {
  if (!fd_.valid()) return;
  tellRoot(why, true);
  awaitFailureReport(most);
  fd_.reset();
}

void BootstrapClient::checkForFailure() {
  pollfd p{fd_.get(), POLLIN, 0};
  if (!fd_.valid() || ::poll(&p, 1, 0) <= 0) return;
  // Between rounds the root only ever sends an error; it is small, and already here.
  static const std::atomic<bool> never{false};
  Waiter w(milliseconds(5000), &never, [] { return std::string("the rendezvous's error report"); });
  uint32_t hdr[2];
  readAll(fd_.get(), hdr, sizeof hdr, w, "the rendezvous");
  if (hdr[0] != static_cast<uint32_t>(FrameType::Error) || hdr[1] > kMaxBootstrapFrame)
    fail(Errc::Remote, "the rendezvous sent an unexpected frame (type %u) between rounds", hdr[0]);
  std::string payload(hdr[1], '\0');
  readAll(fd_.get(), payload.data(), payload.size(), w, "the rendezvous");
  throw rootReport(payload);
}

std::vector<std::string> BootstrapClient::allgather(const std::string& mine, Waiter& w) {
  std::string f = frame(FrameType::Gather, mine);
  const char* who = "the rendezvous";
  try {
    writeAll(fd_.get(), f.data(), f.size(), w, who);
    uint32_t hdr[2];
    readAll(fd_.get(), hdr, sizeof hdr, w, who);
    if (hdr[1] > kMaxBootstrapFrame)
      fail(Errc::Remote, "the rendezvous sent a frame of %u bytes (at most %u allowed)", hdr[1], kMaxBootstrapFrame);
    std::string payload(hdr[1], '\0');
    readAll(fd_.get(), payload.data(), payload.size(), w, who);
    if (hdr[0] == static_cast<uint32_t>(FrameType::Error)) throw rootReport(payload);
    if (hdr[0] == static_cast<uint32_t>(FrameType::Reject)) {
      const std::string why = peerText(payload);
      throw Error(Errc::InvalidUsage, why.empty() ? "the rendezvous turned this process away without saying why" : why);
    }
    if (hdr[0] != static_cast<uint32_t>(FrameType::Result))
      fail(Errc::Remote, "the rendezvous sent an unknown frame type %u", hdr[0]);
    std::vector<std::string> out;
    size_t off = 0;
    for (int r = 0; r < nranks_; ++r) {
      uint32_t len;
      if (payload.size() - off < 4) fail(Errc::Remote, "truncated bootstrap result");
      memcpy(&len, payload.data() + off, 4);
      off += 4;
      if (payload.size() - off < len) fail(Errc::Remote, "truncated bootstrap result");
      out.push_back(payload.substr(off, len));
      off += len;
    }
    if (off != payload.size()) fail(Errc::Remote, "bootstrap result has %zu trailing bytes", payload.size() - off);
    return out;
  } catch (const Error& e) {
    if (e.code() == Errc::Remote && strstr(e.what(), "closed by") != nullptr)
      fail(Errc::Remote, "lost the rendezvous (the process that made the unique id exited?): %s", e.what());
    throw;
  }
}

void BootstrapClient::awaitFailureReport(milliseconds most) {
  if (!fd_.valid()) return;
  Waiter w(most, nullptr, [] { return std::string("the rendezvous's error report"); });
  try {
    for (;;) {
      checkForFailure();
      w.idle([&](milliseconds m) {
        pollfd p{fd_.get(), POLLIN, 0};
        pollFor(&p, 1, static_cast<int>(m.count()));
      });
    }
  } catch (const RendezvousFailure&) {
    throw;
  } catch (const Error&) {
    // No report in time, or the link closed without one: the caller keeps its own error.
  }
}

void installForkHandler() {
  static std::once_flag once;
  std::call_once(once, [] { pthread_atfork(nullptr, nullptr, [] { closeTrackedSocketsInChild(); }); });
}

}  // namespace hora
