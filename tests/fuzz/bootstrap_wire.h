// The bootstrap frames as src/comm/bootstrap.h documents them ({u32 type, u32 length,
// payload}), for the fuzz harnesses that play a root or ranks.
#pragma once
#include <cstdint>
#include <cstring>
#include <string>

namespace fuzz {

enum BootstrapType : uint32_t { kGather = 1, kResult = 2, kError = 3, kBye = 4, kGaveUp = 6 };

inline std::string bootstrapFrame(uint32_t type, const std::string& payload) {
  std::string s(8, '\0');
  const uint32_t len = static_cast<uint32_t>(payload.size());
  memcpy(&s[0], &type, 4);
  memcpy(&s[4], &len, 4);
  return s + payload;
}

}  // namespace fuzz
