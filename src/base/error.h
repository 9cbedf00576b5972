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
  System = 2,           // the operating system refused something (socket, memory, thread)
  Internal = 3,         // a bug in Hora
  InvalidArgument = 4,  // a bad argument from the caller
  InvalidUsage = 5,     // a call that is wrong in this state (e.g. on a failed communicator)
  Remote = 6,           // a peer died, closed its connection or sent malformed data
  Timeout = 8,          // a peer stopped answering within the timeout
};

class Error : public std::runtime_error {
 public:
  Error(Errc code, std::string message) : std::runtime_error(std::move(message)), code_(code) {}
  Errc code() const noexcept { return code_; }

 private:
  Errc code_;
};

// A failure that a peer reported (an abort frame): its text already names the rank where the
// failure began, and is passed on unchanged so that every rank reports the first cause.
class PeerFailure : public Error {
 public:
  explicit PeerFailure(std::string message) : Error(Errc::Remote, std::move(message)) {}
};

// printf-style formatting into a std::string.
std::string format(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
std::string vformat(const char* fmt, va_list ap);

[[noreturn]] void fail(Errc code, const char* fmt, ...) __attribute__((format(printf, 2, 3)));

// errno's text, for messages.
std::string errnoText(int err);

}  // namespace hora
