// The frame header of the byte-stream transports (TCP, and the shared-memory rings). Every
// message on a stream is one frame:
//
//   offset  size  field
//        0     4  magic "HRFR"
//        4     2  type: 1 data, 2 abort (payload: the reason, UTF-8 text, <= kMaxAbortText)
//        6     2  call: a data frame's collective call on its communicator, counted from 1
//                 modulo 65536 (0: none, as for send/recv); 0 in an abort frame
//        8     8  sequence: the message's index in this direction of the connection
//       16     8  length of the payload in bytes
//       24     8  tag: what the sender is doing (collective, dtype, op, count), see transport.h
//
// Little-endian. A header is checked in full (magic, type, sequence, length, tag and call
// against what the receiver posted) before any payload byte is read. The call number also
// tells a frame that waits where no receive is posted (one of a later call, or of another
// collective in this call: a mismatch) apart (core/executor.cc).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace hora::frame {

inline constexpr uint32_t kFrameMagic = 0x52465248;  // "HRFR" little-endian
inline constexpr size_t kFrameHeaderBytes = 32;
inline constexpr size_t kMaxAbortText = 1024;

enum class FrameType : uint16_t { Data = 1, Abort = 2 };

struct FrameHeader {
  FrameType type = FrameType::Data;
  uint64_t seq = 0;
  uint64_t length = 0;
  uint64_t tag = 0;
  uint16_t call = 0;
};

void encodeFrameHeader(const FrameHeader& h, uint8_t out[kFrameHeaderBytes]);

// What a receiver expects of the next data frame.
struct Expectation {
  uint64_t seq;
  uint64_t length;
  uint64_t tag;
  uint16_t call = 0;  // 0: any
};

enum class FrameCheck { Ok, Abort, Bad, Mismatch };

// The fields of a header as they are, checked for nothing (the type field: Data unless it
// says Abort); for a look at a frame that no receive has claimed yet.
FrameHeader peekFrameHeader(const uint8_t in[kFrameHeaderBytes]);

// Decodes and checks a header. Ok: a data frame that matches `expect`. Abort: a well-formed
// abort frame (its length is <= kMaxAbortText; its tag is the code of the sender's failure).
// Mismatch: a well-formed data frame of another call (tag, length, or call number when both
// sides have one): the ranks' calls differ.
// Bad: anything else, with the reason in *why.
FrameCheck decodeFrameHeader(const uint8_t in[kFrameHeaderBytes], const Expectation& expect,
                             FrameHeader* out, std::string* why);

}  // namespace hora::frame
