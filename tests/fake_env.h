// A fake environment for the configuration and launcher parsers' tests: a map read through the
// EnvLookup the parsers take instead of getenv.
#pragma once
#include <map>
#include <optional>
#include <string>

#include "comm/config.h"

namespace hora::test {

using Env = std::map<std::string, std::string>;

inline EnvLookup lookup(const Env& env) {
  return [env](const char* name) -> std::optional<std::string> {
    auto it = env.find(name);
    if (it == env.end()) return std::nullopt;
    return it->second;
  };
}

inline bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace hora::test
