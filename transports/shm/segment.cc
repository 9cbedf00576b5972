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
#include "base/handshake.h"

namespace hora::shm {

namespace {

constexpr size_t kAlign = 4096;
size_t roundUp(size_t n) { return (n + kAlign - 1) & ~(kAlign - 1); }

size_t ctlOffset() { return roundUp(sizeof(Header)); }
size_t ringOffset(uint32_t nlocal) { return roundUp(ctlOffset() + nlocal * sizeof(RingCtl)); }

}  // namespace

void populate(const void* p, size_t bytes, bool write) {
#if defined(MADV_POPULATE_WRITE) && defined(MADV_POPULATE_READ)
  (void)madvise(const_cast<void*>(p), bytes, write ? MADV_POPULATE_WRITE : MADV_POPULATE_READ);
#else
  (void)p;
  (void)bytes;
  (void)write;
#endif
}

size_t Segment::sizeFor(uint32_t nlocal, uint64_t ringBytes, uint64_t stageBytes) {
  return ringOffset(nlocal) + nlocal * roundUp(ringBytes) + roundUp(stageBytes) + kCells * (kCellBytes + kNoteBytes);
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

uint8_t* Segment::notes() const { return cells() + kCells * kCellBytes; }

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
  // The rings are allocated as they are first used: a host of n ranks has n * n of them (at 64
  // ranks, 4 GiB of rings of 1 MiB, most of which no algorithm uses), and allocating and
  // mapping every one at init made horaCommInitRank grow as n^3 (24 s at 64 ranks as threads
  // with every peer's segment populated too). The header, the ring controls, the stage and the
  // cells, which every call uses, are allocated and mapped now (populate()). A ring is mapped
  // whole by the first message of a page or more through it (Connection::warm); smaller ones
  // fault in the pages they touch (about a microsecond each, once).
  void* p = mmap(nullptr, s.size_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) fail(Errc::System, "mapping a shared segment of %zu bytes: %s", s.size_, errnoText(errno).c_str());
  s.base_ = static_cast<uint8_t*>(p);
  populate(s.base_, ringOffset(nlocal));
  Header* h = new (s.base_) Header();
  h->magic = kSegmentMagic;
  h->version = kSegmentVersion;
  h->nlocal = nlocal;
  h->localIndex = localIndex;
  h->ringBytes = ringBytes;
  h->stageBytes = stageBytes;
  h->ownAddress = reinterpret_cast<uintptr_t>(h);
  randomBytes(&h->probe, sizeof h->probe);
  for (uint32_t j = 0; j < nlocal; ++j) new (s.ctl(j)) RingCtl();
  populate(s.stage(), roundUp(stageBytes) + kCells * (kCellBytes + kNoteBytes));
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
  // Not populated whole: a peer's segment holds a ring for every rank of the host, of which this
  // rank reads one (populating every peer's whole segment cost each rank n segments of n rings:
  // at 64 ranks as threads of one process, most of 24 s in horaCommInitRank). The header and
  // the ring controls are mapped now (populateFor), the rest as calls first touch it.
  void* p = mmap(nullptr, s.size_, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
  if (p == MAP_FAILED) fail(Errc::System, "mapping the shared segment of %s: %s", who.c_str(), errnoText(errno).c_str());
  s.base_ = static_cast<uint8_t*>(p);
  s.fd_ = std::move(fd);
  const Header* h = s.header();
  if (h->magic != kSegmentMagic || h->version != kSegmentVersion || h->nlocal != nlocal ||
      h->localIndex != localIndex || h->ringBytes != ringBytes || h->stageBytes != stageBytes)
    fail(Errc::Remote, "%s sent a shared segment whose header does not match this job's layout", who.c_str());
  return s;
}

void Segment::populateFor() const {
  const Header* h = header();
  populate(base_, ringOffset(h->nlocal));
  // On a host of up to 16 ranks, the first page of each of the stage's two slots and of each
  // cell, which is what a small call reads (left to fault in, 64 cells faulting in one call each
  // cost the first thousand 8-byte Broadcasts 0.1-0.2 us apiece; mapping the whole 4 MiB of
  // every peer cost 16 ranks as threads 0.2 s of init). On a larger host everything but the
  // header faults in as used (about 1 us a page, once), which costs less than 66 calls to the
  // kernel per peer at init.
  if (h->nlocal > 16) return;
  const size_t stageBytes = roundUp(h->stageBytes);
  for (size_t at : {size_t(0), stageBytes / 2 / kAlign * kAlign}) populate(stage() + at, kAlign);
  for (int c = 0; c < kCells; ++c) populate(cells() + static_cast<size_t>(c) * kCellBytes, kAlign);
  populate(notes(), kCells * kNoteBytes, false);
}

}  // namespace hora::shm
