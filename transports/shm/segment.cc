#include "transports/shm/segment.h"

#include <fcntl.h>
#include <linux/memfd.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "base/error.h"

namespace hora::shm {

namespace {

constexpr size_t kAlign = 4096;
size_t roundUp(size_t n) { return (n + kAlign - 1) & ~(kAlign - 1); }

size_t ctlOffset() { return roundUp(sizeof(Header)); }
size_t ringOffset(uint32_t nlocal) { return roundUp(ctlOffset() + nlocal * sizeof(RingCtl)); }

}  // namespace

size_t Segment::sizeFor(uint32_t nlocal, uint64_t ringBytes, uint64_t stageBytes) {
  return ringOffset(nlocal) + nlocal * roundUp(ringBytes) + roundUp(stageBytes) + kCells * kCellBytes;
}

Segment::~Segment() {
  if (base_) munmap(base_, size_);
}

Segment::Segment(Segment&& o) noexcept : fd_(std::move(o.fd_)), base_(o.base_), size_(o.size_) {
  o.base_ = nullptr;
  o.size_ = 0;
}

Segment& Segment::operator=(Segment&& o) noexcept {
  if (this != &o) {
    if (base_) munmap(base_, size_);
    fd_ = std::move(o.fd_);
    base_ = o.base_;
    size_ = o.size_;
    o.base_ = nullptr;
    o.size_ = 0;
  }
  return *this;
}

RingCtl* Segment::ctl(uint32_t receiver) const {
  return reinterpret_cast<RingCtl*>(base_ + ctlOffset()) + receiver;
}

uint8_t* Segment::ring(uint32_t receiver) const {
  return base_ + ringOffset(header()->nlocal) + receiver * roundUp(header()->ringBytes);
}

uint8_t* Segment::stage() const {
  return base_ + ringOffset(header()->nlocal) + header()->nlocal * roundUp(header()->ringBytes);
}

uint8_t* Segment::cells() const { return stage() + roundUp(header()->stageBytes); }

Segment Segment::create(uint32_t nlocal, uint32_t localIndex, uint64_t ringBytes, uint64_t stageBytes) {
  Segment s;
  s.size_ = sizeFor(nlocal, ringBytes, stageBytes);
  int fd = static_cast<int>(syscall(SYS_memfd_create, "hora-shm", MFD_CLOEXEC | MFD_ALLOW_SEALING));
  if (fd < 0) fail(Errc::System, "memfd_create: %s", errnoText(errno).c_str());
  s.fd_ = Fd(fd);
  if (ftruncate(fd, static_cast<off_t>(s.size_)) != 0)
    fail(Errc::System, "sizing a shared segment of %zu bytes: %s", s.size_, errnoText(errno).c_str());
  if (fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0)
    fail(Errc::System, "sealing a shared segment: %s", errnoText(errno).c_str());
  // MAP_POPULATE: the pages are allocated and mapped now, not one fault at a time on the
  // first pass of each ring (which added a microsecond to each of the first thousand 8 KiB
  // messages).
  void* p = mmap(nullptr, s.size_, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  if (p == MAP_FAILED) fail(Errc::System, "mapping a shared segment of %zu bytes: %s", s.size_, errnoText(errno).c_str());
  s.base_ = static_cast<uint8_t*>(p);
  Header* h = new (s.base_) Header();
  h->magic = kSegmentMagic;
  h->version = kSegmentVersion;
  h->nlocal = nlocal;
  h->localIndex = localIndex;
  h->ringBytes = ringBytes;
  h->stageBytes = stageBytes;
  for (uint32_t j = 0; j < nlocal; ++j) new (s.ctl(j)) RingCtl();
  return s;
}

Segment Segment::attach(Fd fd, uint32_t nlocal, uint32_t localIndex, uint64_t ringBytes, uint64_t stageBytes,
                        const std::string& who) {
  Segment s;
  s.size_ = sizeFor(nlocal, ringBytes, stageBytes);
  int seals = fcntl(fd.get(), F_GET_SEALS);
  if (seals < 0 || !(seals & F_SEAL_SHRINK) || !(seals & F_SEAL_SEAL))
    fail(Errc::Remote, "%s sent a shared segment that is not sealed against shrinking", who.c_str());
  struct stat st;
  if (fstat(fd.get(), &st) != 0 || static_cast<size_t>(st.st_size) != s.size_)
    fail(Errc::Remote, "%s sent a shared segment of %lld bytes, expected %zu", who.c_str(),
         static_cast<long long>(st.st_size), s.size_);
  void* p = mmap(nullptr, s.size_, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd.get(), 0);
  if (p == MAP_FAILED) fail(Errc::System, "mapping the shared segment of %s: %s", who.c_str(), errnoText(errno).c_str());
  s.base_ = static_cast<uint8_t*>(p);
  s.fd_ = std::move(fd);
  const Header* h = s.header();
  if (h->magic != kSegmentMagic || h->version != kSegmentVersion || h->nlocal != nlocal ||
      h->localIndex != localIndex || h->ringBytes != ringBytes || h->stageBytes != stageBytes)
    fail(Errc::Remote, "%s sent a shared segment whose header does not match this job's layout", who.c_str());
  return s;
}

}  // namespace hora::shm
