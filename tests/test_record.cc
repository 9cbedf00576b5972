// The peer record (src/base/record.h): what every rank sends every other at init. A record from a
// peer is never trusted: every truncation, bad count, bad name, repeated name, overlong field,
// trailing byte and foreign version is rejected with a reason, and nothing is read out of bounds.
#include <catch2/catch.hpp>

#include <cstring>
#include <random>

#include "base/record.h"

using namespace hora;

namespace {
Record sample() {
  Record r;
  r.set("core", FieldWriter().u32(7).u64(1ull << 40).str("host-a").take());
  r.set("shm", FieldWriter().str("hora-abc").take());
  r.set("empty", "");
  r.set("tcp", std::string(300, 'x'));
  return r;
}

void put32(std::string& s, size_t at, uint32_t v) {
  for (int i = 0; i < 4; ++i) s[at + static_cast<size_t>(i)] = static_cast<char>(v >> (8 * i));
}
}  // namespace

TEST_CASE("record: a round trip keeps every field, in order", "[record]") {
  const std::string wire = sample().encode();
  Record back;
  std::string why;
  REQUIRE(Record::decode(wire, &back, &why));
  REQUIRE(back.fields() == sample().fields());
  FieldReader r(*back.get("core"));
  uint32_t a = 0;
  uint64_t b = 0;
  std::string h;
  CHECK(r.u32(&a));
  CHECK(r.u64(&b));
  CHECK(r.str(&h, 64));
  CHECK(r.atEnd());
  CHECK(a == 7);
  CHECK(b == 1ull << 40);
  CHECK(h == "host-a");
  CHECK(back.get("none") == nullptr);
  // A field a reader does not know is carried and skipped, not an error.
  Record more = sample();
  more.set("future-transport", std::string(1000, '\x01'));
  REQUIRE(Record::decode(more.encode(), &back, &why));
  CHECK(back.get("shm") != nullptr);
}

TEST_CASE("record: every truncation and every trailing byte is rejected", "[record]") {
  const std::string wire = sample().encode();
  for (size_t n = 0; n < wire.size(); ++n) {
    Record r;
    std::string why;
    INFO("prefix of " << n << " bytes");
    CHECK_FALSE(Record::decode(wire.substr(0, n), &r, &why));
    CHECK_FALSE(why.empty());
  }
  Record r;
  std::string why;
  CHECK_FALSE(Record::decode(wire + '\0', &r, &why));
  CHECK(why.find("after its last field") != std::string::npos);
}

TEST_CASE("record: bad magic, version, counts, names and lengths are rejected", "[record]") {
  const std::string wire = sample().encode();
  Record r;
  std::string why;
  std::string bad = wire;
  bad[0] ^= 1;
  CHECK_FALSE(Record::decode(bad, &r, &why));
  CHECK(why.find("magic") != std::string::npos);
  bad = wire;
  put32(bad, 4, (4u << 16) | (kRecordVersion + 1));
  CHECK_FALSE(Record::decode(bad, &r, &why));
  CHECK(why.find("version") != std::string::npos);
  bad = wire;
  put32(bad, 4, (65535u << 16) | kRecordVersion);
  CHECK_FALSE(Record::decode(bad, &r, &why));
  // The first field: name length 4 ("core") at byte 8, its bytes, then its u32 length.
  bad = wire;
  bad[8] = 0;  // an empty name
  CHECK_FALSE(Record::decode(bad, &r, &why));
  bad = wire;
  bad[8] = static_cast<char>(kRecordMaxName + 1);
  CHECK_FALSE(Record::decode(bad, &r, &why));
  bad = wire;
  bad[9] = '\n';  // not printable
  CHECK_FALSE(Record::decode(bad, &r, &why));
  bad = wire;
  put32(bad, 13, 0xffffffffu);  // the field runs past the end
  CHECK_FALSE(Record::decode(bad, &r, &why));
  CHECK(why.find("runs past its end") != std::string::npos);
  // A name twice.
  Record twice;
  twice.set("a", "1");
  twice.set("b", "2");
  std::string dup = twice.encode();
  dup[dup.size() - 6] = 'a';  // the second name, "b", becomes "a"
  CHECK_FALSE(Record::decode(dup, &r, &why));
  CHECK(why.find("repeated") != std::string::npos);
}

TEST_CASE("record: random damage never crashes and never reads out of bounds", "[record]") {
  const std::string wire = sample().encode();
  std::mt19937 rng(12345);
  int accepted = 0;
  for (int i = 0; i < 20000; ++i) {
    std::string s = wire;
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int k = 0; k < flips; ++k) s[rng() % s.size()] = static_cast<char>(rng());
    if (rng() % 4 == 0) s.resize(rng() % (s.size() + 1));
    Record r;
    std::string why;
    if (Record::decode(s, &r, &why)) {
      ++accepted;
      size_t total = 0;
      for (const auto& [name, bytes] : r.fields()) total += name.size() + bytes.size();
      CHECK(total <= s.size());
    } else {
      CHECK_FALSE(why.empty());
    }
  }
  // Flips inside a field's payload still decode: the record checks framing, its owner the rest.
  CHECK(accepted > 0);
}

TEST_CASE("record: field readers stop at the end of their field", "[record]") {
  const std::string f = FieldWriter().u32(1).str("abc").take();
  FieldReader r(f);
  uint32_t v = 0;
  std::string s;
  CHECK(r.u32(&v));
  CHECK_FALSE(r.str(&s, 2));  // longer than allowed
  const std::string head = f.substr(0, 6);  // kept: a reader is a view of its bytes
  FieldReader r2(head);
  CHECK(r2.u32(&v));
  CHECK_FALSE(r2.str(&s, 64));  // says 3 bytes, has 0
  uint64_t w = 0;
  const std::string zeros(7, '\0');
  FieldReader r3(zeros);
  CHECK_FALSE(r3.u64(&w));
  CHECK_THROWS(Record().set("", "x"));
  CHECK_THROWS(Record().set("bad name", "x"));
}
