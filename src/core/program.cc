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

int32_t ProgramBuilder::localAll(Action a, const std::vector<int32_t>& deps, const std::vector<const void*>& srcs) {
  a.srcList = static_cast<uint32_t>(p_.srcLists.size());
  a.nsrcList = static_cast<uint32_t>(srcs.size());
  p_.srcLists.insert(p_.srcLists.end(), srcs.begin(), srcs.end());
  Op op{OpKind::Local, -1, nullptr, 0, {-1, -1}, static_cast<uint32_t>(p_.depLists.size()),
        static_cast<uint32_t>(deps.size()), a};
  p_.depLists.insert(p_.depLists.end(), deps.begin(), deps.end());
  return add(op);
}

int32_t ProgramBuilder::send(int peer, const void* buf, size_t bytes, Deps d) {
  return add(Op{OpKind::Send, peer, const_cast<void*>(buf), bytes, {d.a, d.b}, 0, 0, Action{}});
}

int32_t ProgramBuilder::recv(int peer, void* buf, size_t bytes, Deps d, const Action& then) {
  return add(Op{OpKind::Recv, peer, buf, bytes, {d.a, d.b}, 0, 0, then});
}

int32_t ProgramBuilder::post(int counter, uint64_t value, Deps d) {
  return add(Op{OpKind::Post, counter, nullptr, value, {d.a, d.b}, 0, 0, Action{}});
}

int32_t ProgramBuilder::wait(int counter, uint64_t value, Deps d) {
  return add(Op{OpKind::Wait, counter, nullptr, value, {d.a, d.b}, 0, 0, Action{}});
}

int32_t ProgramBuilder::local(const Action& a, Deps d) {
  return add(Op{OpKind::Local, -1, nullptr, 0, {d.a, d.b}, 0, 0, a});
}

SlotPool::SlotPool(Scratch& scratch, int nslots, size_t slotBytes)
    : mem_(static_cast<size_t>(nslots)), lastUse_(static_cast<size_t>(nslots), -1) {
  for (auto& m : mem_) m = static_cast<uint8_t*>(scratch.get(slotBytes));
}

SlotPool::Slot SlotPool::take() {
  size_t i = next_++ % mem_.size();
  return Slot{mem_[i], lastUse_[i], static_cast<int>(i)};
}

}  // namespace hora::core
