#include "core/device_copies.h"

#include <algorithm>
#include <cstdint>
#include <numeric>

#include "base/types.h"

namespace hora::core {

namespace {

using Addr = uintptr_t;
Addr addr(const void* p) { return reinterpret_cast<Addr>(p); }

// One chunk of a copy: [lo, hi) of the host block, and where in device memory it comes from or
// goes to.
struct Chunk {
  Addr lo, hi;
  Addr dev;
};

std::vector<Chunk> chunksOf(const std::vector<DeviceCopy>& copies, bool in, size_t chunkBytes) {
  size_t total = 0;
  for (const DeviceCopy& c : copies) total += c.bytes;
  size_t size = chunkBytes ? std::max(chunkBytes, (total + kMaxCopyChunks - 1) / kMaxCopyChunks) : SIZE_MAX;
  if (size != SIZE_MAX) size = (size + 63) & ~size_t(63);  // whole cache lines
  std::vector<Chunk> out;
  for (const DeviceCopy& c : copies) {
    const Addr host = addr(in ? c.dst : c.src), dev = addr(in ? c.src : c.dst);
    for (size_t at = 0; at < c.bytes; at += std::min(size, c.bytes - at))
      out.push_back(Chunk{host + at, host + at + std::min(size, c.bytes - at), dev + at});
  }
  return out;
}

// The ranges of host memory an op reads and writes on this rank.
struct Range {
  Addr lo, hi;
  bool writes;
};

void rangesOf(const Program& p, const Op& o, std::vector<Range>& out) {
  out.clear();
  const auto add = [&](const void* b, size_t bytes, bool writes) {
    if (b && bytes) out.push_back(Range{addr(b), addr(b) + bytes, writes});
  };
  switch (o.kind) {
    case OpKind::Send:
    case OpKind::Put: add(o.buf, o.bytes, false); break;
    case OpKind::Recv:
    case OpKind::Fetch: add(o.buf, o.bytes, true); break;
    default: break;
  }
  const Action& a = o.action;
  if ((o.kind == OpKind::Local || o.kind == OpKind::Recv) && a.active && a.count) {
    const size_t bytes = a.count * dataTypeSize(a.spec.dtype);
    add(a.dst, bytes, true);
    add(a.dst2, bytes, true);
    if (a.nsrcList) {
      for (uint32_t i = 0; i < a.nsrcList; ++i) add(p.srcLists[a.srcList + i], bytes, false);
    } else {
      add(a.src0, bytes, false);
      add(a.src1, bytes, false);
    }
  }
}

bool overlaps(const Range& r, const Chunk& c) { return r.lo < c.hi && c.lo < r.hi; }

Action copyAction(Addr dst, Addr src, size_t bytes) {
  Action a;
  a.active = true;
  a.engine = Engine::Copies;
  a.dst = reinterpret_cast<void*>(dst);
  a.src0 = reinterpret_cast<const void*>(src);
  a.count = bytes;
  a.spec.dtype = DataType::Uint8;
  return a;
}

// Adds `more` to op o's dependencies (a list of its own where two slots do not hold them all).
void addDeps(Program& p, int32_t o, const std::vector<int32_t>& more) {
  if (more.empty()) return;
  Op& op = p.ops[static_cast<size_t>(o)];
  std::vector<int32_t> all;
  for (int32_t d : op.dep)
    if (d >= 0) all.push_back(d);
  for (uint32_t i = 0; i < op.ndepList; ++i) all.push_back(p.depLists[op.depList + i]);
  all.insert(all.end(), more.begin(), more.end());
  op.dep[0] = op.dep[1] = -1;
  if (all.size() <= 2) {
    for (size_t i = 0; i < all.size(); ++i) op.dep[i] = all[i];
    op.ndepList = 0;
    return;
  }
  op.depList = static_cast<uint32_t>(p.depLists.size());
  op.ndepList = static_cast<uint32_t>(all.size());
  p.depLists.insert(p.depLists.end(), all.begin(), all.end());
}

}  // namespace

CopiesAdded addDeviceCopies(Program& p, const DeviceCopies& copies) {
  CopiesAdded added;
  const auto n0 = static_cast<int32_t>(p.ops.size());
  bool remote = p.exposes;
  for (const Op& o : p.ops) remote |= o.kind == OpKind::Fetch || o.kind == OpKind::Put;
  const std::vector<Chunk> ins = chunksOf(copies.ins, true, remote ? 0 : copies.chunkBytes);
  const std::vector<Chunk> outs = chunksOf(copies.outs, false, remote ? 0 : copies.chunkBytes);

  // Which ops touch which chunk of the inputs, and the first op that does.
  std::vector<Range> ranges;
  std::vector<std::vector<int32_t>> users(ins.size()), writers(outs.size());
  std::vector<int32_t> firstUse(ins.size(), INT32_MAX);
  for (int32_t i = 0; i < n0; ++i) {
    rangesOf(p, p.ops[static_cast<size_t>(i)], ranges);
    for (const Range& r : ranges) {
      for (size_t k = 0; k < ins.size(); ++k)
        if (overlaps(r, ins[k]) && (users[k].empty() || users[k].back() != i)) {
          users[k].push_back(i);
          firstUse[k] = std::min(firstUse[k], i);
        }
      if (r.writes)
        for (size_t k = 0; k < outs.size(); ++k)
          if (overlaps(r, outs[k]) && (writers[k].empty() || writers[k].back() != i)) writers[k].push_back(i);
    }
  }

  // The copies in, in the order of first need (posted at once, they run in that order).
  std::vector<size_t> order(ins.size());
  std::iota(order.begin(), order.end(), size_t(0));
  std::stable_sort(order.begin(), order.end(), [&](size_t x, size_t y) { return firstUse[x] < firstUse[y]; });
  std::vector<int32_t> inOp(ins.size());
  ProgramBuilder b(p);
  for (size_t k : order) inOp[k] = b.local(copyAction(ins[k].lo, ins[k].dev, ins[k].hi - ins[k].lo));
  added.in = ins.size();

  if (remote) {
    // Every op after every copy in: the ops that depend on nothing wait for them all.
    const int32_t allIn = ins.empty() ? -1 : b.join(inOp.front(), inOp.back() + 1);
    if (allIn >= 0)
      for (int32_t i = 0; i < n0; ++i) {
        const Op& o = p.ops[static_cast<size_t>(i)];
        if (o.dep[0] < 0 && o.dep[1] < 0 && o.ndepList == 0) addDeps(p, i, {allIn});
      }
    const int32_t all = n0 > 0 ? b.join(0, n0) : allIn;
    for (const Chunk& c : outs) {
      std::vector<int32_t> deps;
      if (all >= 0) deps.push_back(all);
      b.localAll(copyAction(c.dev, c.lo, c.hi - c.lo), deps, {});
    }
    added.out = outs.size();
    return added;
  }

  std::vector<std::vector<int32_t>> more(static_cast<size_t>(n0));
  for (size_t k = 0; k < ins.size(); ++k)
    for (int32_t i : users[k]) more[static_cast<size_t>(i)].push_back(inOp[k]);
  for (int32_t i = 0; i < n0; ++i) addDeps(p, i, more[static_cast<size_t>(i)]);

  for (size_t k = 0; k < outs.size(); ++k) {
    const Chunk& c = outs[k];
    std::vector<int32_t> deps = writers[k];
    // In place: the chunk came in through the same bytes of the block.
    bool cameFromHere = false;
    for (size_t j = 0; j < ins.size(); ++j) {
      const Range whole{c.lo, c.hi, false};
      if (!overlaps(whole, ins[j])) continue;
      deps.push_back(inOp[j]);
      cameFromHere |= ins[j].lo <= c.lo && c.hi <= ins[j].hi && ins[j].dev + (c.lo - ins[j].lo) == c.dev;
    }
    if (writers[k].empty() && cameFromHere) {
      ++added.outSkipped;  // nothing changed it: the device holds it already
      continue;
    }
    b.localAll(copyAction(c.dev, c.lo, c.hi - c.lo), deps, {});
    ++added.out;
  }
  return added;
}

void copiesProgram(Program& p, const std::vector<DeviceCopy>& copies) {
  p.clear();
  ProgramBuilder b(p);
  for (const DeviceCopy& c : copies) b.local(copyAction(addr(c.dst), addr(c.src), c.bytes));
}

}  // namespace hora::core
