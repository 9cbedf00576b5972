// The environment of a fuzz input for the configuration harnesses: lines NAME=VALUE (the last
// line of a name wins). Variables that name files to read are never set: the parsers of what
// such files hold are fuzzed directly.
#pragma once
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "comm/config.h"

namespace fuzz {

struct Env {
  std::map<std::string, std::string> vars;
  std::vector<std::string> names;  // in the order the lines gave them

  explicit Env(const std::string& text) {
    size_t start = 0;
    while (start < text.size()) {
      size_t end = text.find('\n', start);
      if (end == std::string::npos) end = text.size();
      const std::string line = text.substr(start, end - start);
      const size_t eq = line.find('=');
      if (eq != std::string::npos && line.compare(0, eq, "HORA_TUNE_FILE") != 0 &&
          line.compare(0, eq, "HORA_SECRET_FILE") != 0) {
        vars[line.substr(0, eq)] = line.substr(eq + 1);
        names.push_back(line.substr(0, eq));
      }
      start = end + 1;
    }
  }

  hora::EnvLookup lookup() const {
    return [this](const char* name) -> std::optional<std::string> {
      auto it = vars.find(name);
      if (it == vars.end()) return std::nullopt;
      return it->second;
    };
  }
};

}  // namespace fuzz
