#include "core/program.h"

#include <algorithm>

namespace hora::core {

void* Scratch::get(size_t bytes) {
  bytes = (bytes + 63) & ~size_t(63);
  for (Block& b : blocks_)
    if (b.size - b.used >= bytes) {
      void* p = b.mem.get() + b.used;
      b.used += bytes;
      return p;
    }
  size_t size = std::max(bytes, size_t(4) << 20);
  blocks_.push_back(Block{std::unique_ptr<uint8_t[]>(new uint8_t[size]), size, bytes});
  return blocks_.back().mem.get();
}

void Scratch::reset() {
  for (Block& b : blocks_) b.used = 0;
}

int32_t ProgramBuilder::add(Op op) {
  p_.ops.push_back(op);
  return static_cast<int32_t>(p_.ops.size() - 1);
}

int32_t ProgramBuilder::addLocal(Action a, uint32_t depList, size_t ndeps, const void* const* srcs, size_t nsrcs) {
  a.srcList = static_cast<uint32_t>(p_.srcLists.size());
  a.nsrcList = static_cast<uint32_t>(nsrcs);
  p_.srcLists.insert(p_.srcLists.end(), srcs, srcs + nsrcs);
  Op op{OpKind::Local};
  op.depList = depList;
  op.ndepList = static_cast<uint32_t>(ndeps);
  op.action = a;
  return add(op);
}

int32_t ProgramBuilder::localAll(Action a, const int32_t* deps, size_t ndeps, const void* const* srcs, size_t nsrcs) {
  const auto depList = static_cast<uint32_t>(p_.depLists.size());
  p_.depLists.insert(p_.depLists.end(), deps, deps + ndeps);
  return addLocal(a, depList, ndeps, srcs, nsrcs);
}

int32_t ProgramBuilder::splice(const Program& sub, const int* team, int32_t gate) {
  const auto first = static_cast<int32_t>(p_.ops.size());
  p_.exposes |= sub.exposes;
  const auto depBase = static_cast<uint32_t>(p_.depLists.size()), srcBase = static_cast<uint32_t>(p_.srcLists.size());
  for (int32_t d : sub.depLists) p_.depLists.push_back(d < 0 ? d : d + first);
  p_.srcLists.insert(p_.srcLists.end(), sub.srcLists.begin(), sub.srcLists.end());
  for (Op op : sub.ops) {
    if (op.kind == OpKind::Send || op.kind == OpKind::Recv) op.peer = team[static_cast<size_t>(op.peer)];
    for (int32_t& d : op.dep)
      if (d >= 0) d += first;
    if (op.ndepList) op.depList += depBase;
    if (op.action.nsrcList) op.action.srcList += srcBase;
    if (op.dep[0] < 0 && op.dep[1] < 0 && op.ndepList == 0) op.dep[0] = gate;
    p_.ops.push_back(op);
  }
  return first;
}

int32_t ProgramBuilder::join(int32_t first, int32_t last) {
  const int32_t n = last > first ? last - first : 0;
  if (n <= 2) return local(Action{}, Deps{n > 0 ? first : -1, n > 1 ? first + 1 : -1});
  const auto depList = static_cast<uint32_t>(p_.depLists.size());
  for (int32_t i = first; i < last; ++i) p_.depLists.push_back(i);
  return addLocal(Action{}, depList, static_cast<size_t>(n), nullptr, 0);
}

namespace {
Op make(OpKind kind, Deps d) {
  Op op{kind};
  op.dep[0] = d.a;
  op.dep[1] = d.b;
  return op;
}
}  // namespace

namespace {
Op remote(OpKind kind, const ProgramBuilder::Remote& r, const void* buf, size_t bytes, Deps d) {
  Op op = make(kind, d);
  op.peer = r.member;
  op.buf = const_cast<void*>(buf);
  op.bytes = bytes;
  op.value = r.chunk;
  op.offset = r.offset;
  op.total = r.total;
  op.action.src0 = r.published;
  return op;
}
}  // namespace

int32_t ProgramBuilder::fetch(const Remote& from, void* buf, size_t bytes, Deps d) {
  return add(remote(OpKind::Fetch, from, buf, bytes, d));
}

int32_t ProgramBuilder::put(const Remote& to, const void* buf, size_t bytes, Deps d) {
  return add(remote(OpKind::Put, to, buf, bytes, d));
}

int32_t ProgramBuilder::send(int peer, const void* buf, size_t bytes, Deps d) {
  Op op = make(OpKind::Send, d);
  op.peer = peer;
  op.buf = const_cast<void*>(buf);
  op.bytes = bytes;
  return add(op);
}

int32_t ProgramBuilder::recv(int peer, void* buf, size_t bytes, Deps d, const Action& then) {
  Op op = make(OpKind::Recv, d);
  op.peer = peer;
  op.buf = buf;
  op.bytes = bytes;
  op.action = then;
  return add(op);
}

int32_t ProgramBuilder::signal(int counter, uint64_t value, Deps d) {
  Op op = make(OpKind::Signal, d);
  op.counter = counter;
  op.value = value;
  return add(op);
}

int32_t ProgramBuilder::wait(int counter, uint64_t value, Deps d) {
  Op op = make(OpKind::Wait, d);
  op.counter = counter;
  op.value = value;
  return add(op);
}

int32_t ProgramBuilder::local(const Action& a, Deps d) {
  Op op = make(OpKind::Local, d);
  op.action = a;
  return add(op);
}

SlotPool::SlotPool(Scratch& scratch, int nslots, size_t slotBytes) {
  if (nslots < 1 || nslots > kMaxSlots) fail(Errc::Internal, "a plan of %d staging slots (1 to %d)", nslots, kMaxSlots);
  for (int i = 0; i < nslots; ++i) {
    mem_.push_back(static_cast<uint8_t*>(scratch.get(slotBytes)));
    lastUse_.push_back(-1);
  }
}

SlotPool::Slot SlotPool::take() {
  size_t i = next_++ % mem_.size();
  return Slot{mem_[i], lastUse_[i], static_cast<int>(i)};
}

}  // namespace hora::core
