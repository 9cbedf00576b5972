// Tests of the unique id (comm/bootstrap.h: encode/decode, hex, commId), of the address
// helpers it is built on (base/socket.h: SockAddr::parse, pack/unpack, interfaceMatches), and of
// the rendezvous turning away a process that does not fit its job.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "base/error.h"
#include "base/handshake.h"
#include "base/log.h"
#include "base/socket.h"
#include "comm/bootstrap.h"

using namespace hora;

namespace {

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

Secret makeSecret(uint8_t seed) {
  Secret s;
  for (size_t i = 0; i < kSecretBytes; ++i) s.bytes[i] = static_cast<uint8_t>(seed * 13 + i * 5 + 3);
  return s;
}

UniqueId makeId(const std::string& addr, uint8_t seed) {
  UniqueId id;
  id.root = SockAddr::parse(addr);
  id.secret = makeSecret(seed);
  return id;
}

bool sameAddr(const SockAddr& a, const SockAddr& b) {
  if (a.family() != b.family() || a.port() != b.port()) return false;
  if (a.family() == AF_INET)
    return memcmp(&reinterpret_cast<const sockaddr_in*>(&a.ss)->sin_addr,
                  &reinterpret_cast<const sockaddr_in*>(&b.ss)->sin_addr, 4) == 0;
  if (a.family() == AF_INET6)
    return memcmp(&reinterpret_cast<const sockaddr_in6*>(&a.ss)->sin6_addr,
                  &reinterpret_cast<const sockaddr_in6*>(&b.ss)->sin6_addr, 16) == 0;
  return false;
}

template <class F>
std::string invalidArgument(F f) {
  try {
    f();
  } catch (const Error& e) {
    CHECK(e.code() == Errc::InvalidArgument);
    return e.what();
  }
  FAIL("no hora::Error thrown");
  return {};
}

}  // namespace

// ---- UniqueId -----------------------------------------------------------------------------------

TEST_CASE("unique id: encode/decode and hex round trip", "[id]") {
  for (const char* addr : {"127.0.0.1:29500", "10.1.2.3:1", "255.255.255.255:65535", "[::1]:5",
                           "[fe80::1:2:3:4]:40000", "[2001:db8::ff00:42:8329]:443"}) {
    INFO(addr);
    UniqueId id = makeId(addr, 7);
    uint8_t raw[kUniqueIdBytes];
    memset(raw, 0xCC, sizeof raw);
    id.encode(raw);
    CHECK(memcmp(raw, "HRID", 4) == 0);
    UniqueId back = UniqueId::decode(raw);
    CHECK(sameAddr(back.root, id.root));
    CHECK(back.root.str() == id.root.str());
    CHECK(memcmp(back.secret.bytes, id.secret.bytes, kSecretBytes) == 0);

    std::string hex = id.hex();
    CHECK(hex.size() == 2 * kUniqueIdBytes);
    CHECK(hex.find_first_not_of("0123456789abcdef") == std::string::npos);
    UniqueId fromHex = UniqueId::fromHex(hex);
    CHECK(sameAddr(fromHex.root, id.root));
    CHECK(memcmp(fromHex.secret.bytes, id.secret.bytes, kSecretBytes) == 0);
    CHECK(fromHex.hex() == hex);
    // Upper-case digits are accepted too.
    std::string upper = hex;
    for (char& c : upper) c = static_cast<char>(toupper(static_cast<unsigned char>(c)));
    CHECK(UniqueId::fromHex(upper).hex() == hex);
    CHECK(UniqueId::fromHex(upper).commId() == id.commId());
  }
}

TEST_CASE("unique id: decode rejects what is not an id", "[id]") {
  UniqueId id = makeId("192.168.1.20:29500", 1);
  uint8_t good[kUniqueIdBytes];
  id.encode(good);

  SECTION("bad magic") {
    for (int byte = 0; byte < 4; ++byte) {
      uint8_t raw[kUniqueIdBytes];
      memcpy(raw, good, sizeof raw);
      raw[byte] ^= 0x20;
      std::string what = invalidArgument([&] { UniqueId::decode(raw); });
      CHECK(contains(what, "magic"));
    }
    uint8_t zeros[kUniqueIdBytes] = {};
    CHECK(contains(invalidArgument([&] { UniqueId::decode(zeros); }), "magic"));
  }
  SECTION("wrong version") {
    uint8_t raw[kUniqueIdBytes];
    memcpy(raw, good, sizeof raw);
    uint16_t v = kProtocolVersion + 1;
    memcpy(raw + 4, &v, 2);
    std::string what = invalidArgument([&] { UniqueId::decode(raw); });
    CHECK(contains(what, "version"));
    CHECK(contains(what, std::to_string(kProtocolVersion + 1)));
  }
  SECTION("zero port") {
    UniqueId z = makeId("192.168.1.20:0", 1);
    uint8_t raw[kUniqueIdBytes];
    z.encode(raw);
    CHECK(contains(invalidArgument([&] { UniqueId::decode(raw); }), "address"));
    CHECK(contains(invalidArgument([&] { UniqueId::fromHex(z.hex()); }), "address"));
  }
  SECTION("bad family") {
    for (uint8_t fam : {0, 1, 5, 7, 44, 255}) {
      uint8_t raw[kUniqueIdBytes];
      memcpy(raw, good, sizeof raw);
      raw[8] = fam;  // the packed address's family tag
      INFO("family tag " << int(fam));
      CHECK(contains(invalidArgument([&] { UniqueId::decode(raw); }), "address"));
    }
  }
}

TEST_CASE("unique id: fromHex rejects bad text", "[id]") {
  std::string hex = makeId("127.0.0.1:1234", 2).hex();
  SECTION("wrong length") {
    for (size_t len : {size_t(0), size_t(1), size_t(255), size_t(257), size_t(512)}) {
      std::string h = hex;
      h.resize(len, '0');
      INFO("length " << len);
      invalidArgument([&] { UniqueId::fromHex(h); });
    }
  }
  SECTION("non-hex characters") {
    for (size_t pos : {size_t(0), size_t(1), size_t(100), size_t(255)})
      for (char c : {'g', 'G', ' ', 'x', '-', '\0'}) {
        std::string h = hex;
        h[pos] = c;
        INFO("position " << pos << " char " << int(c));
        std::string what = invalidArgument([&] { UniqueId::fromHex(h); });
        CHECK(contains(what, "hex"));
      }
  }
}

// Regression: fromHex's length error once passed its arguments in the wrong order: for a 10-digit text
// it says "a unique id in hex has 256 digits, not 10" instead of "has 10 digits, not 256".
TEST_CASE("unique id: fromHex's length error states the given length", "[id]") {
  std::string what = invalidArgument([] { UniqueId::fromHex("0123456789"); });
  INFO(what);
  CHECK(contains(what, "has 10 digits"));
  CHECK(contains(what, "256"));
}

TEST_CASE("unique id: commId", "[id]") {
  UniqueId a = makeId("127.0.0.1:1000", 1);
  UniqueId b = makeId("127.0.0.1:1000", 2);
  UniqueId a2 = makeId("10.0.0.9:2000", 1);  // same secret, other address
  CHECK(a.commId() == a.commId());
  CHECK(a.commId() == a2.commId());
  CHECK(a.commId() != b.commId());
  CHECK(a.commId() != 0);
  // Every single-bit change of the secret changes it.
  for (size_t bit = 0; bit < 8 * kSecretBytes; ++bit) {
    UniqueId c = a;
    c.secret.bytes[bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
    INFO("bit " << bit);
    CHECK(c.commId() != a.commId());
  }
  // Stable across a trip through text.
  CHECK(UniqueId::fromHex(a.hex()).commId() == a.commId());
}

// ---- SockAddr -----------------------------------------------------------------------------------

TEST_CASE("SockAddr::parse", "[addr]") {
  SockAddr a = SockAddr::parse("127.0.0.1:80");
  CHECK(a.family() == AF_INET);
  CHECK(a.port() == 80);
  CHECK(a.isLoopback());
  CHECK(a.str() == "127.0.0.1:80");
  CHECK(a.len == sizeof(sockaddr_in));

  SockAddr b = SockAddr::parse("[::1]:5");
  CHECK(b.family() == AF_INET6);
  CHECK(b.port() == 5);
  CHECK(b.isLoopback());
  CHECK(b.str() == "[::1]:5");
  CHECK(b.len == sizeof(sockaddr_in6));

  SockAddr c = SockAddr::parse("10.20.30.40:65535");
  CHECK(c.port() == 65535);
  CHECK(!c.isLoopback());
  CHECK(c.str() == "10.20.30.40:65535");

  SockAddr d = SockAddr::parse("[2001:db8::1]:0");
  CHECK(d.port() == 0);
  CHECK(d.str() == "[2001:db8::1]:0");
  d.setPort(1234);
  CHECK(d.port() == 1234);
  CHECK(d.str() == "[2001:db8::1]:1234");

  CHECK(SockAddr::parse("localhost:9").port() == 9);
  CHECK(SockAddr::parse("localhost:9").isLoopback());
  CHECK(SockAddr().str() == "(no address)");
}

TEST_CASE("SockAddr::parse rejects bad forms", "[addr]") {
  for (const char* bad : {"", "127.0.0.1", ":80", "127.0.0.1:", "127.0.0.1:http", "127.0.0.1:65536",
                          "127.0.0.1:-1", "127.0.0.1:8x", "[::1]", "[::1]5", "[::1", "[::1]:", "[::1]:abc",
                          "[::1]:99999", "[::1]:5x"}) {
    INFO("'" << bad << "'");
    invalidArgument([&] { SockAddr::parse(bad); });
  }
}

TEST_CASE("SockAddr pack/unpack", "[addr]") {
  for (const char* text : {"127.0.0.1:80", "1.2.3.4:65535", "0.0.0.0:0", "[::1]:5", "[2001:db8::ff00:42:8329]:443",
                           "[::]:1"}) {
    INFO(text);
    SockAddr a = SockAddr::parse(text);
    uint8_t packed[SockAddr::kPackedBytes];
    memset(packed, 0xEE, sizeof packed);
    a.pack(packed);
    CHECK(packed[0] == (a.family() == AF_INET ? 4 : 6));
    CHECK(packed[1] == 0);
    CHECK(((packed[2] << 8) | packed[3]) == a.port());  // big endian
    SockAddr b;
    REQUIRE(SockAddr::unpack(packed, &b));
    CHECK(sameAddr(a, b));
    CHECK(b.len == a.len);
    CHECK(b.str() == a.str());
  }
  uint8_t bad[SockAddr::kPackedBytes] = {};
  SockAddr untouched = SockAddr::parse("1.1.1.1:1");
  for (uint8_t fam : {0, 1, 5, 46, 255}) {
    bad[0] = fam;
    CHECK(!SockAddr::unpack(bad, &untouched));
  }
  CHECK(untouched.str() == "1.1.1.1:1");
}

// ---- interfaceMatches ---------------------------------------------------------------------------

TEST_CASE("interfaceMatches", "[addr]") {
  // Prefixes.
  CHECK(interfaceMatches("eth", "eth0"));
  CHECK(interfaceMatches("eth", "eth1"));
  CHECK(interfaceMatches("eth", "eth"));
  CHECK(!interfaceMatches("eth", "ib0"));
  CHECK(!interfaceMatches("eth", "et"));
  CHECK(!interfaceMatches("eth0", "eth"));
  // Exact.
  CHECK(interfaceMatches("=eth0", "eth0"));
  CHECK(!interfaceMatches("=eth0", "eth01"));
  CHECK(!interfaceMatches("=eth0", "eth"));
  // Exclusions only: everything else matches.
  CHECK(!interfaceMatches("^docker", "docker0"));
  CHECK(!interfaceMatches("^docker", "docker"));
  CHECK(interfaceMatches("^docker", "eth0"));
  CHECK(interfaceMatches("^docker", "dock"));
  CHECK(interfaceMatches("^docker,^lo", "ib0"));
  CHECK(!interfaceMatches("^docker,^lo", "lo"));
  // Combinations.
  CHECK(interfaceMatches("eth,ib", "ib0"));
  CHECK(interfaceMatches("eth,ib", "eth2"));
  CHECK(!interfaceMatches("eth,ib", "lo"));
  CHECK(interfaceMatches("eth,^eth1", "eth0"));
  CHECK(!interfaceMatches("eth,^eth1", "eth1"));
  CHECK(!interfaceMatches("^eth1,eth", "eth1"));
  CHECK(!interfaceMatches("eth,^eth1", "ib0"));
  CHECK(interfaceMatches("=lo,eth", "lo"));
  CHECK(!interfaceMatches("=lo,eth", "lo0"));
  CHECK(interfaceMatches("=lo,eth", "eth7"));
  CHECK(!interfaceMatches("=eth0,^eth0", "eth0"));
  // Empty items are ignored.
  CHECK(interfaceMatches("eth,,", "eth0"));
  CHECK(interfaceMatches(",", "anything"));
  CHECK(interfaceMatches("", "anything"));
}

// Once every rank has joined (and before they have left: the root serves them until then), a
// process that comes as one of them is turned away naming the rank and its holder, and one of
// another size naming both sizes; the job goes on and its rendezvous ends when its rank leaves.
TEST_CASE("rendezvous: a latecomer after the job's rendezvous is turned away, and the job goes on", "[rendezvous]") {
  auto end = std::make_shared<RendezvousEnd>();
  const UniqueId id = startRendezvous(SockAddr::parse("127.0.0.1:0"), makeSecret(7), milliseconds(20000), end, 1);
  Waiter w(milliseconds(20000), nullptr, [] { return std::string("the test's rendezvous"); });
  BootstrapClient rank0(id, 0, 1, w);
  CHECK(rank0.allgather("mine", w) == std::vector<std::string>{"mine"});

  const std::string me = format("rank 0 (%s, pid %d)", log::hostName(), static_cast<int>(getpid()));
  const std::string where = "cannot join the rendezvous at " + id.root.str() + ": ";
  auto turnedAway = [&](int rank, int nranks) -> std::string {
    BootstrapClient late(id, rank, nranks, w);
    try {
      late.allgather("late", w);
    } catch (const Error& e) {
      CHECK(e.code() == Errc::InvalidUsage);
      late.abandon("turned away");
      return e.what();
    }
    return "joined";
  };
  const std::string dup = turnedAway(0, 1);
  CHECK(contains(dup, me + " " + where + me + " has joined it already"));
  const std::string size = turnedAway(1, 2);
  CHECK(contains(size, format("rank 1 (%s, pid %d) ", log::hostName(), static_cast<int>(getpid())) + where +
                           "it was started as one of 2 ranks, but the job there has 1 rank "));

  rank0.barrier(w);
  rank0.finish(w);
  CHECK(end->await(milliseconds(20000)));
}
