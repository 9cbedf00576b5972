// Tests of the TCP transport's frame header (transports/frame.h): round trips, the
// documented layout, and every kind of malformed header (each wrong field, every single-bit
// corruption, random garbage), which must decode as Bad with a reason, never as Ok. The
// tcp::Connection tests over real socket pairs are in test_tcp_connection.cc.
#include <cstdint>
#include <cstring>
#include <random>
#include <string>

#include <catch2/catch.hpp>

#include "transports/frame.h"
#include "unit_frame.h"
#include "unit_net.h"

using namespace hora;
using namespace unit;  // with the frame names of unit_frame.h
using hora::frame::kFrameMagic;
using hora::frame::kMaxAbortText;

// =============================================================================================
// Frame header
// =============================================================================================

TEST_CASE("frame header: round trip of data frames", "[frame]") {
  const uint64_t values[] = {0, 1, 31, 4096, 0x0123456789abcdefULL, ~0ULL};
  for (uint64_t seq : values)
    for (uint64_t len : values)
      for (uint64_t tag : values) {
        Encoded e = encode(FrameType::Data, seq, len, tag);
        uint32_t magic;
        memcpy(&magic, e.b, 4);
        REQUIRE(magic == kFrameMagic);
        REQUIRE(memcmp(e.b, "HRFR", 4) == 0);
        FrameHeader out;
        out.seq = 99;
        std::string why;
        REQUIRE(decode(e.b, Expectation{seq, len, tag}, &out, &why) == FrameCheck::Ok);
        CHECK(out.type == FrameType::Data);
        CHECK(out.seq == seq);
        CHECK(out.length == len);
        CHECK(out.tag == tag);
      }
}

TEST_CASE("frame header: the layout is the documented one", "[frame]") {
  Encoded e = encode(FrameType::Data, 0x1122334455667788ULL, 0x0102030405060708ULL, 0xa1a2a3a4a5a6a7a8ULL);
  const uint8_t expect[kFrameHeaderBytes] = {
      'H',  'R',  'F',  'R',  1,    0,    0,    0,     // magic, type 1, call 0
      0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11,  // seq
      0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01,  // length
      0xa8, 0xa7, 0xa6, 0xa5, 0xa4, 0xa3, 0xa2, 0xa1,  // tag
  };
  CHECK(memcmp(e.b, expect, kFrameHeaderBytes) == 0);
  Encoded ab = encode(FrameType::Abort, 0, 5, 0);
  CHECK(ab.b[4] == 2);
  CHECK(ab.b[5] == 0);
}

TEST_CASE("frame header: each wrong field is Bad (or, for another call's tag or length, Mismatch) with a reason", "[frame]") {
  const Expectation x{7, 4096, 0xabcdef};
  FrameHeader out;
  std::string why;

  SECTION("magic") {
    Encoded e = encode(FrameType::Data, 7, 4096, 0xabcdef);
    e.b[0] ^= 0x01;
    REQUIRE(decode(e.b, x, &out, &why) == FrameCheck::Bad);
    CHECK(contains(why, "magic"));
  }
  SECTION("call number") {
    Encoded e = encode(FrameType::Data, 7, 4096, 0xabcdef);
    e.b[6] = 5;  // call 5
    // Against an expectation without a call number, any; against call 5, Ok; against 6, Mismatch.
    REQUIRE(decode(e.b, x, &out, &why) == FrameCheck::Ok);
    CHECK(out.call == 5);
    REQUIRE(decode(e.b, Expectation{7, 4096, 0xabcdef, 5}, &out, &why) == FrameCheck::Ok);
    REQUIRE(decode(e.b, Expectation{7, 4096, 0xabcdef, 6}, &out, &why) == FrameCheck::Mismatch);
    CHECK(contains(why, "call #5"));
    CHECK(contains(why, "call #6"));
  }
  SECTION("unknown type") {
    for (uint16_t type : {0, 3, 4, 255, 0x100, 0xffff}) {
      Encoded e = encode(FrameType::Data, 7, 4096, 0xabcdef);
      memcpy(e.b + 4, &type, 2);
      why.clear();
      REQUIRE(decode(e.b, x, &out, &why) == FrameCheck::Bad);
      CHECK(contains(why, "type"));
      CHECK(contains(why, std::to_string(type)));
    }
  }
  SECTION("sequence") {
    Encoded e = encode(FrameType::Data, 8, 4096, 0xabcdef);
    REQUIRE(decode(e.b, x, &out, &why) == FrameCheck::Bad);
    CHECK(contains(why, "sequence"));
    CHECK(contains(why, "8"));
    CHECK(contains(why, "7"));
  }
  SECTION("tag") {
    Encoded e = encode(FrameType::Data, 7, 4096, 0xabcdee);
    REQUIRE(decode(e.b, x, &out, &why) == FrameCheck::Mismatch);
    CHECK(contains(why, "mismatched"));
  }
  SECTION("length") {
    for (uint64_t len : {uint64_t(0), uint64_t(4095), uint64_t(4097), ~uint64_t(0)}) {
      Encoded e = encode(FrameType::Data, 7, len, 0xabcdef);
      why.clear();
      REQUIRE(decode(e.b, x, &out, &why) == FrameCheck::Mismatch);
      CHECK(contains(why, std::to_string(len)));
      CHECK(contains(why, "4096"));
    }
  }
}

TEST_CASE("frame header: every single-bit corruption of a data header is Bad, or Mismatch in the call, length and tag", "[frame]") {
  const Expectation x{3, 1000, 0x5555aaaa12345678ULL, 7};
  Encoded good = encode(FrameType::Data, x.seq, x.length, x.tag);
  good.b[6] = 7;  // call 7 (no bit flip of it gives 0, which would mean no call)
  for (size_t bit = 0; bit < 8 * kFrameHeaderBytes; ++bit) {
    Encoded e = good;
    e.b[bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
    FrameHeader out;
    std::string why;
    INFO("bit " << bit);
    // Bytes 6..7 are the call, 16..31 the length and the tag: a well-formed header of another call.
    const bool another = bit / 8 >= 16 || bit / 8 == 6 || bit / 8 == 7;
    CHECK(decode(e.b, x, &out, &why) == (another ? FrameCheck::Mismatch : FrameCheck::Bad));
    CHECK(!why.empty());
  }
}

TEST_CASE("frame header: abort frames", "[frame]") {
  const Expectation x{5, 64, 0x42};
  for (uint64_t len : {uint64_t(0), uint64_t(1), uint64_t(100), uint64_t(kMaxAbortText)}) {
    // An abort is accepted whatever the sequence and tag: it may come at any point.
    Encoded e = encode(FrameType::Abort, 12345, len, 999);
    FrameHeader out;
    std::string why;
    REQUIRE(decode(e.b, x, &out, &why) == FrameCheck::Abort);
    CHECK(out.type == FrameType::Abort);
    CHECK(out.length == len);
  }
  for (uint64_t len : {uint64_t(kMaxAbortText + 1), uint64_t(1) << 32, ~uint64_t(0)}) {
    Encoded e = encode(FrameType::Abort, 0, len, 0);
    FrameHeader out;
    std::string why;
    REQUIRE(decode(e.b, x, &out, &why) == FrameCheck::Bad);
    CHECK(contains(why, "abort"));
    CHECK(contains(why, std::to_string(kMaxAbortText)));
  }
  // An abort frame with a call number is Bad.
  Encoded e = encode(FrameType::Abort, 0, 10, 0);
  e.b[6] = 1;
  FrameHeader out;
  std::string why;
  CHECK(decode(e.b, x, &out, &why) == FrameCheck::Bad);
}

TEST_CASE("frame header: random garbage never decodes as Ok", "[frame]") {
  for (uint32_t seed = 1; seed <= 2000; ++seed) {
    std::mt19937_64 rng(seed);
    uint8_t buf[kFrameHeaderBytes];
    for (auto& b : buf) b = static_cast<uint8_t>(rng());
    // Half of them carry a valid magic, so the later checks are reached too.
    if (seed % 2 == 0) memcpy(buf, &kFrameMagic, 4);
    if (seed % 4 == 0) buf[6] = buf[7] = 0;
    if (seed % 8 == 0) buf[4] = 1, buf[5] = 0;
    Expectation x{rng() % 1000, rng() % (1u << 20), rng()};
    FrameHeader out;
    std::string why;
    FrameCheck c = decode(buf, x, &out, &why);
    INFO("seed " << seed);
    CHECK(c != FrameCheck::Ok);
    if (c == FrameCheck::Bad || c == FrameCheck::Mismatch) CHECK(!why.empty());
  }
}
