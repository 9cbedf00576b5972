#include "transports/frame.h"

#include <cinttypes>
#include <cstring>

#include "base/error.h"
#include "transports/transport.h"

namespace hora::frame {

namespace {
template <class T>
void put(uint8_t* p, T v) {
  memcpy(p, &v, sizeof v);  // the supported hosts are little-endian
}
template <class T>
T get(const uint8_t* p) {
  T v;
  memcpy(&v, p, sizeof v);
  return v;
}
}  // namespace

void encodeFrameHeader(const FrameHeader& h, uint8_t out[kFrameHeaderBytes]) {
  put<uint32_t>(out, kFrameMagic);
  put<uint16_t>(out + 4, static_cast<uint16_t>(h.type));
  put<uint16_t>(out + 6, h.type == FrameType::Abort ? 0 : h.call);
  put<uint64_t>(out + 8, h.seq);
  put<uint64_t>(out + 16, h.length);
  put<uint64_t>(out + 24, h.tag);
}

FrameHeader peekFrameHeader(const uint8_t in[kFrameHeaderBytes]) {
  FrameHeader h;
  h.type = get<uint16_t>(in + 4) == static_cast<uint16_t>(FrameType::Abort) ? FrameType::Abort : FrameType::Data;
  h.call = get<uint16_t>(in + 6);
  h.seq = get<uint64_t>(in + 8);
  h.length = get<uint64_t>(in + 16);
  h.tag = get<uint64_t>(in + 24);
  return h;
}

FrameCheck decodeFrameHeader(const uint8_t in[kFrameHeaderBytes], const Expectation& expect,
                             FrameHeader* out, std::string* why) {
  uint32_t magic = get<uint32_t>(in);
  uint16_t type = get<uint16_t>(in + 4);
  FrameHeader h;
  h.call = get<uint16_t>(in + 6);
  h.seq = get<uint64_t>(in + 8);
  h.length = get<uint64_t>(in + 16);
  h.tag = get<uint64_t>(in + 24);
  if (magic != kFrameMagic) {
    *why = format("bad frame magic 0x%08x (not a Hora data stream, or the stream lost its place)",
                  magic);
    return FrameCheck::Bad;
  }
  if (type == static_cast<uint16_t>(FrameType::Abort)) {
    if (h.call != 0) {
      *why = format("abort frame with call number 0x%04x (must be 0)", h.call);
      return FrameCheck::Bad;
    }
    if (h.length > kMaxAbortText) {
      *why = format("abort frame of %" PRIu64 " bytes (at most %zu allowed)", h.length,
                    kMaxAbortText);
      return FrameCheck::Bad;
    }
    h.type = FrameType::Abort;
    *out = h;
    return FrameCheck::Abort;
  }
  if (type != static_cast<uint16_t>(FrameType::Data)) {
    *why = format("unknown frame type %u", type);
    return FrameCheck::Bad;
  }
  if (h.seq != expect.seq) {
    *why = format("frame out of sequence: got message %" PRIu64 ", expected %" PRIu64, h.seq,
                  expect.seq);
    return FrameCheck::Bad;
  }
  if (h.tag != expect.tag) {
    *why = format("mismatched calls: the peer is in %s, this rank in %s",
                  transport::describeTag(h.tag).c_str(), transport::describeTag(expect.tag).c_str());
    return FrameCheck::Mismatch;
  }
  if (h.length != expect.length) {
    *why = format("the peer sent %" PRIu64 " bytes where %" PRIu64
                  " were expected (mismatched counts or datatypes across ranks?)",
                  h.length, expect.length);
    return FrameCheck::Mismatch;
  }
  if (expect.call && h.call && h.call != expect.call) {
    *why = format("mismatched calls: the peer is in call #%u (mod 65536) of its communicator, this rank in "
                  "call #%u, both %s (a rank skipped or repeated a collective?)",
                  h.call, expect.call, transport::describeTag(h.tag).c_str());
    return FrameCheck::Mismatch;
  }
  h.type = FrameType::Data;
  *out = h;
  return FrameCheck::Ok;
}

}  // namespace hora::frame
