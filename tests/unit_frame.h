// Helpers shared by the tests of the TCP transport's frame header (test_frame.cc) and of
// tcp::Connection (test_tcp_connection.cc): a header encoded into its bytes, and decoding.
#pragma once
#include <cstdint>
#include <cstring>
#include <string>

#include "transports/frame.h"

namespace unit {

// The frame names the tests use unqualified (they say `using namespace unit`).
using hora::frame::Expectation;
using hora::frame::FrameCheck;
using hora::frame::FrameHeader;
using hora::frame::FrameType;
using hora::frame::kFrameHeaderBytes;

struct Encoded {
  uint8_t b[kFrameHeaderBytes];
};

inline Encoded encode(FrameType type, uint64_t seq, uint64_t length, uint64_t tag) {
  FrameHeader h;
  h.type = type;
  h.seq = seq;
  h.length = length;
  h.tag = tag;
  Encoded e;
  memset(e.b, 0xEE, sizeof e.b);
  hora::frame::encodeFrameHeader(h, e.b);
  return e;
}

inline FrameCheck decode(const uint8_t* in, const Expectation& x, FrameHeader* out, std::string* why) {
  return hora::frame::decodeFrameHeader(in, x, out, why);
}

}  // namespace unit
