#include "base/error.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <vector>

namespace hora {

std::string vformat(const char* fmt, va_list ap) {
  char small[256];
  va_list copy;
  va_copy(copy, ap);
  int n = vsnprintf(small, sizeof small, fmt, copy);
  va_end(copy);
  if (n < 0) return fmt;
  if (static_cast<size_t>(n) < sizeof small) return std::string(small, n);
  std::vector<char> big(static_cast<size_t>(n) + 1);
  vsnprintf(big.data(), big.size(), fmt, ap);
  return std::string(big.data(), n);
}

std::string format(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  std::string s = vformat(fmt, ap);
  va_end(ap);
  return s;
}

void fail(Errc code, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  std::string s = vformat(fmt, ap);
  va_end(ap);
  throw Error(code, std::move(s));
}

std::string errnoText(int err) {
  char buf[128];
  // GNU strerror_r returns the text, which may or may not be buf.
  const char* s = strerror_r(err, buf, sizeof buf);
  return s;
}

std::string peerText(const void* bytes, size_t n) {
  std::string out(static_cast<const char*>(bytes), n);
  for (char& c : out) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u > 0x7e) c = '?';
  }
  return out;
}

std::string peerText(const std::string& bytes, size_t most) {
  return peerText(bytes.data(), std::min(bytes.size(), most));
}

}  // namespace hora
