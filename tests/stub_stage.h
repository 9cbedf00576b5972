// A shared stage for unit tests that need one without a transport: every member is quiet (no
// failure, no mismatch, nothing announced), and a test overrides what it looks at.
#pragma once
#include <string>
#include <vector>

#include "transports/stage.h"

namespace hora::test {

struct StubStage : transport::SharedStage {
  int n;
  std::vector<int> members;
  std::string name = "rank ?";
  // n members, this one the first, with regions of regionBytes (no memory behind them).
  explicit StubStage(int n, size_t regionBytes = 4 * 512 * 1024) : n(n) {
    for (int i = 0; i < n; ++i) members.push_back(i);
    map(std::vector<uint8_t*>(static_cast<size_t>(n)), std::vector<std::atomic<uint64_t>*>(static_cast<size_t>(n)),
        regionBytes, 0);
  }
  Access access = Access::None;  // whether the members reach each other's memory (the single copy)
  Access memberAccess() const override { return access; }
  int size() const override { return n; }
  int index() const override { return 0; }
  const std::vector<int>& ranks() const override { return members; }
  const std::string& memberName(int) const override { return name; }
  void wakeAll() const override {}
  std::string arm(int, Errc*, std::vector<pollfd>&) const override { return ""; }
  void disarm() const override {}
  void announce(uint64_t, uint64_t) const override {}
  int mismatch(uint64_t, uint64_t, uint64_t*, int) const override { return -1; }
  bool announced(int, uint64_t, uint64_t*) const override { return false; }
  uint64_t lastCall(int) const override { return 0; }
  void publishUnchecked(uint64_t) const override {}
  uint64_t checkedThrough(int) const override { return 0; }
  bool closed(int) const override { return false; }
  void markFailed(const std::string&, Errc) const override {}
};

}  // namespace hora::test
