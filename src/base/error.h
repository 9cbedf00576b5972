// Errors inside the library. Internal code reports failure by throwing hora::Error; the C ABI
// (src/api) catches everything at its boundary and turns it into a result code plus the
// last-error text, so nothing ever throws across the ABI. Hot paths never throw unless
// something has failed.
#pragma once
#include <cstdarg>
#include <stdexcept>
#include <string>

namespace hora {

// The numbering is horaResult_t's.
enum class Errc : int {
  Success = 0,
  Cuda = 1,             // the CUDA runtime refused something (horaUnhandledCudaError)
  System = 2,           // the operating system refused something (socket, memory, thread)
  Internal = 3,         // a bug in Hora
  InvalidArgument = 4,  // a bad argument from the caller
  InvalidUsage = 5,     // a call that is wrong in this state (e.g. on a failed communicator)
  Remote = 6,           // a peer died, closed its connection or sent malformed data
  InProgress = 7,       // a non-blocking operation on a communicator has not finished
  Timeout = 8,          // a peer stopped answering within the timeout
};

class Error : public std::runtime_error {
 public:
  Error(Errc code, std::string message) : std::runtime_error(std::move(message)), code_(code) {}
  Errc code() const noexcept { return code_; }
  // Where the text is kept short for the caller (the culprit, the call, this rank), the whole
  // story: for a wait, every rank and message it was on and how far each got. It goes to the
  // WARN log and the flight recorder's dump, never to the caller's text; "" when there is none.
  const std::string& detail() const noexcept { return detail_; }
  void setDetail(std::string detail) { detail_ = std::move(detail); }

 private:
  Errc code_;
  std::string detail_;
};

// A failure that a peer reported (an abort frame, a shared segment's failure record): its text
// already names the rank where the failure began, and is passed on unchanged with the code of
// that first cause, so that every rank reports the same cause with the same code.
class PeerFailure : public Error {
 public:
  explicit PeerFailure(std::string message, Errc code = Errc::Remote) : Error(code, std::move(message)) {}
};

// The code a peer sent as a number: one of Errc's failures, else Remote (a peer's bytes are
// not trusted to name a code this build has).
inline Errc peerCode(uint64_t v) {
  switch (v) {
    case 1: case 2: case 3: case 4: case 5: case 6: case 8: return static_cast<Errc>(v);
    default: return Errc::Remote;
  }
}

// Text that came from another process, made fit to show: every byte outside printable ASCII
// becomes '?', and at most `most` bytes are kept; "" stays "".
std::string peerText(const std::string& bytes, size_t most = 4096);
std::string peerText(const void* bytes, size_t n);  // all n bytes

// printf-style formatting into a std::string.
std::string format(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
std::string vformat(const char* fmt, va_list ap);

[[noreturn]] void fail(Errc code, const char* fmt, ...) __attribute__((format(printf, 2, 3)));

// errno's text, for messages.
std::string errnoText(int err);

}  // namespace hora
