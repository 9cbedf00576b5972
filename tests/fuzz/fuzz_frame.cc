// The frame header of the byte-stream transports (transports/frame.h): 32 bytes from a peer,
// checked against what the receiver posted. The input is the header, then the expectation
// (sequence, length, tag; missing bytes are zeros).
//
// Invariants: the outcome is the one frame.h documents for those bytes (a data frame that
// matches in full is Ok, a well-formed abort frame is Abort, anything else is Bad with a
// reason); what Ok and Abort return re-encodes to the same 32 bytes; and any header encoded
// from fields decodes back to those fields.
#include <cstdint>
#include <cstring>
#include <string>

#include "coll/collective.h"
#include "fuzz.h"
#include "transports/frame.h"
#include "transports/transport.h"

using namespace hora::frame;

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // As a communicator does: a tag mismatch is described as the calls that made the tags.
  hora::transport::setTagDescriber(hora::coll::describeTag);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::Input in(data, size);
  uint8_t hdr[kFrameHeaderBytes] = {0};
  const std::string h = in.bytes(kFrameHeaderBytes);
  memcpy(hdr, h.data(), h.size());
  Expectation x{in.u64(), in.u64(), in.u64(), static_cast<uint16_t>(in.u64())};

  FrameHeader out;
  out.seq = 0x5555;
  std::string why;
  const FrameCheck c = decodeFrameHeader(hdr, x, &out, &why);

  // The documented outcome, from the layout in frame.h.
  uint32_t magic;
  uint16_t type, call;
  uint64_t seq, length, tag;
  memcpy(&magic, hdr, 4);
  memcpy(&type, hdr + 4, 2);
  memcpy(&call, hdr + 6, 2);
  memcpy(&seq, hdr + 8, 8);
  memcpy(&length, hdr + 16, 8);
  memcpy(&tag, hdr + 24, 8);
  const bool wellFormed = magic == kFrameMagic;
  FrameCheck expected = FrameCheck::Bad;
  if (wellFormed && type == static_cast<uint16_t>(FrameType::Abort) && length <= kMaxAbortText && call == 0)
    expected = FrameCheck::Abort;
  else if (wellFormed && type == static_cast<uint16_t>(FrameType::Data) && seq == x.seq)
    // A data frame in sequence: this call's (Ok), or another call's tag, length or number,
    // where both sides number it (Mismatch).
    expected = length == x.length && tag == x.tag && (!x.call || !call || x.call == call) ? FrameCheck::Ok
                                                                                          : FrameCheck::Mismatch;
  FUZZ_CHECK(c == expected, "decodeFrameHeader's verdict differs from frame.h's");

  if (c == FrameCheck::Bad || c == FrameCheck::Mismatch) {
    FUZZ_CHECK(!why.empty(), "a bad frame without a reason");
  } else {
    FUZZ_CHECK(out.seq == seq && out.length == length && out.tag == tag && out.call == call);
    FUZZ_CHECK(out.type == (c == FrameCheck::Ok ? FrameType::Data : FrameType::Abort));
    uint8_t again[kFrameHeaderBytes];
    encodeFrameHeader(out, again);
    FUZZ_CHECK(memcmp(again, hdr, kFrameHeaderBytes) == 0, "a decoded header re-encodes differently");
  }

  // Fields -> bytes -> fields, for a header made of the same input.
  FrameHeader mine;
  mine.type = (type & 1) ? FrameType::Data : FrameType::Abort;
  mine.seq = seq;
  mine.length = mine.type == FrameType::Abort ? length % (kMaxAbortText + 1) : length;
  mine.tag = tag;
  mine.call = mine.type == FrameType::Abort ? 0 : call;
  uint8_t enc[kFrameHeaderBytes];
  encodeFrameHeader(mine, enc);
  FrameHeader back;
  std::string why2;
  const FrameCheck c2 = decodeFrameHeader(enc, Expectation{mine.seq, mine.length, mine.tag, mine.call}, &back, &why2);
  FUZZ_CHECK(c2 == (mine.type == FrameType::Data ? FrameCheck::Ok : FrameCheck::Abort), why2);
  FUZZ_CHECK(back.type == mine.type && back.seq == mine.seq && back.length == mine.length && back.tag == mine.tag &&
             back.call == mine.call);
  return 0;
}
