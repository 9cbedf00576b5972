// What the fuzz harnesses (tests/fuzz/*.cc) share: reading the fuzzer's bytes as fields, and
// the checks every parser owes its caller. A parse of bytes from outside the process either
// returns a value within its documented range or throws hora::Error with a text that says what
// is wrong; any other exception, an empty text, a crash or a sanitizer report is a bug, and
// abort() hands it to libFuzzer, which saves the input as the reproducer.
#pragma once
#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>
#include <utility>

#include "base/error.h"

namespace fuzz {

[[noreturn]] inline void bug(const char* what, const std::string& detail = std::string()) {
  fprintf(stderr, "fuzz invariant broken: %s%s%s\n", what, detail.empty() ? "" : ": ", detail.c_str());
  abort();
}

#define FUZZ_CHECK(cond, ...)                                                      \
  do {                                                                             \
    if (!(cond)) ::fuzz::bug("check `" #cond "` failed at " __FILE__ ":" FUZZ_STR(__LINE__), ##__VA_ARGS__); \
  } while (0)
#define FUZZ_STR2(x) #x
#define FUZZ_STR(x) FUZZ_STR2(x)

// Runs f(); returns true when it returned, false when it threw a hora::Error whose text is not
// empty (and whose code, when `code` is given, is that one). Anything else is a bug.
template <class F>
bool returnsOrFails(F&& f, hora::Errc code = hora::Errc::Success) {
  try {
    std::forward<F>(f)();
    return true;
  } catch (const hora::Error& e) {
    if (e.what()[0] == '\0') bug("a hora::Error without a text");
    if (code != hora::Errc::Success && e.code() != code)
      bug("a hora::Error of an unexpected code", std::to_string(static_cast<int>(e.code())) + ": " + e.what());
    return false;
  } catch (const std::exception& e) {
    bug("an exception that is not a hora::Error", e.what());
  } catch (...) {
    bug("an exception that is not a std::exception");
  }
}

// Waits up to ms for events on fd; true when they came. A signal does not cut the wait short
// (libFuzzer's -timeout runs on SIGALRM, which interrupts poll()).
inline bool pollOne(int fd, short events, int ms) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - std::chrono::steady_clock::now());
    pollfd p{fd, events, 0};
    const int n = ::poll(&p, 1, left.count() > 0 ? static_cast<int>(left.count()) : 0);
    if (n > 0) return true;
    if (n == 0 || errno != EINTR) return false;
  }
}

// Writes all of buf to a blocking socket, unless the other end closes or fails first; returns
// whether it all went.
inline bool sendAll(int fd, const void* buf, size_t n) {
  const char* p = static_cast<const char*>(buf);
  while (n > 0) {
    const ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

// The fuzzer's bytes, consumed front to back; reads past the end give zeros.
class Input {
 public:
  Input(const uint8_t* data, size_t size) : p_(data), left_(size) {}
  uint8_t u8() {
    if (!left_) return 0;
    --left_;
    return *p_++;
  }
  uint16_t u16() { return static_cast<uint16_t>(u8() | u8() << 8); }
  uint32_t u32() { return static_cast<uint32_t>(u16() | static_cast<uint32_t>(u16()) << 16); }
  uint64_t u64() { return u32() | static_cast<uint64_t>(u32()) << 32; }
  // Up to n bytes (fewer at the end).
  std::string bytes(size_t n) {
    n = n < left_ ? n : left_;
    std::string s(reinterpret_cast<const char*>(p_), n);
    p_ += n;
    left_ -= n;
    return s;
  }
  std::string rest() { return bytes(left_); }
  size_t left() const { return left_; }

 private:
  const uint8_t* p_;
  size_t left_;
};

}  // namespace fuzz
