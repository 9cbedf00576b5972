// The unique id (src/comm/bootstrap.h) as it arrives from outside: 128 bytes through
// horaCommInitRank (UniqueId::decode), and 256 hex digits in HORA_ID (UniqueId::fromHex). The
// input's first 128 bytes (zeros after its end) are the raw id; the whole input is the hex text.
//
// Invariants: an id that decodes has a rendezvous address with a port and re-encodes to an id
// that decodes to the same address and secret; its hex text parses back to it, in upper case
// too; anything else is Error(InvalidArgument) with a text.
#include <cctype>
#include <cstring>
#include <string>

#include "comm/bootstrap.h"
#include "fuzz.h"

using namespace hora;

namespace {

bool same(const UniqueId& a, const UniqueId& b) {
  return a.root.str() == b.root.str() && memcmp(a.secret.bytes, b.secret.bytes, kSecretBytes) == 0 &&
         a.commId() == b.commId();
}

void check(const UniqueId& id) {
  FUZZ_CHECK(id.root.port() != 0, "an id without a port");
  FUZZ_CHECK(id.root.family() == AF_INET || id.root.family() == AF_INET6, "an id of another address family");
  uint8_t raw[kUniqueIdBytes];
  id.encode(raw);
  UniqueId again;
  FUZZ_CHECK(fuzz::returnsOrFails([&] { again = UniqueId::decode(raw); }), "an encoded id does not decode");
  FUZZ_CHECK(same(id, again), "an id changes through encode and decode");
  const std::string hex = id.hex();
  FUZZ_CHECK(hex.size() == 2 * kUniqueIdBytes, "a hex id of " + std::to_string(hex.size()) + " digits");
  FUZZ_CHECK(same(UniqueId::fromHex(hex), id), "an id changes through hex");
  std::string upper = hex;
  for (char& c : upper) c = static_cast<char>(toupper(static_cast<unsigned char>(c)));
  FUZZ_CHECK(same(UniqueId::fromHex(upper), id), "an id changes through upper-case hex");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  uint8_t raw[kUniqueIdBytes] = {0};
  memcpy(raw, data, size < kUniqueIdBytes ? size : kUniqueIdBytes);
  UniqueId id;
  if (fuzz::returnsOrFails([&] { id = UniqueId::decode(raw); }, Errc::InvalidArgument)) check(id);
  const std::string text(reinterpret_cast<const char*>(data), size);
  if (fuzz::returnsOrFails([&] { id = UniqueId::fromHex(text); }, Errc::InvalidArgument)) check(id);
  return 0;
}
