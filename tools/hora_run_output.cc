// hora-run's output forwarding: rank output pipes to hora-run's stdout and stderr, whole
// lines at a time.
#include <poll.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <string>

#include "hora_run.h"

namespace hora::run {
namespace {

// A line longer than this without a newline is written out in pieces.
constexpr size_t kMaxPartialLine = size_t{1} << 20;
constexpr size_t kReadChunk = size_t{1} << 16;
constexpr int kMaxReadsAtOnce = 64;

}  // namespace

bool OutputStream::readOnce() {
  if (!fd_.valid()) return false;
  std::array<char, kReadChunk> buffer;
  ssize_t n;
  do {
    n = ::read(fd_.get(), buffer.data(), buffer.size());
  } while (n < 0 && errno == EINTR);
  if (n > 0) {
    forward(buffer.data(), static_cast<size_t>(n));
    return true;
  }
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return false;
  close();
  return false;
}

void OutputStream::readAvailable() {
  for (int i = 0; i < kMaxReadsAtOnce && readOnce(); ++i) {
  }
}

void OutputStream::close() {
  if (!partial_.empty()) {
    std::string line = prefix_ + partial_ + "\n";
    partial_.clear();
    writeAll(destination_, line.data(), line.size());
  }
  fd_.reset();
}

void OutputStream::forward(const char* data, size_t size) {
  std::string out;
  size_t start = 0;
  while (start < size) {
    const void* newline = std::memchr(data + start, '\n', size - start);
    if (newline == nullptr) {
      partial_.append(data + start, size - start);
      break;
    }
    size_t end = static_cast<size_t>(static_cast<const char*>(newline) - data) + 1;
    out += prefix_;
    out += partial_;
    out.append(data + start, end - start);
    partial_.clear();
    start = end;
  }
  if (partial_.size() > kMaxPartialLine) {
    out += prefix_ + partial_ + "\n";
    partial_.clear();
  }
  // If hora-run's own stdout is gone, the output is dropped; the ranks still run to the end.
  if (!out.empty()) writeAll(destination_, out.data(), out.size());
}

bool writeAll(int fd, const char* data, size_t size) {
  while (size > 0) {
    ssize_t n = ::write(fd, data, size);
    if (n > 0) {
      data += n;
      size -= static_cast<size_t>(n);
    } else if (n < 0 && errno == EAGAIN) {
      pollfd writable{fd, POLLOUT, 0};  // a non-blocking fd from our parent
      poll(&writable, 1, -1);
    } else if (n < 0 && errno != EINTR) {
      return false;
    }
  }
  return true;
}

void printError(const std::string& message) {
  std::string line = "hora-run: " + message + "\n";
  writeAll(STDERR_FILENO, line.data(), line.size());
}

}  // namespace hora::run
