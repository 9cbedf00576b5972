// What the configuration tests (test_config.cc, test_config_nccl.cc) share: parsing a fake
// environment, an invalid value's expected error, and the optional transports of this build.
#pragma once
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "base/error.h"
#include "comm/config.h"
#include "fake_env.h"
#include "transports/registry.h"

namespace hora::test {

inline Config parse(const Env& env) { return parseConfig(lookup(env)); }

// Parses and expects InvalidArgument whose message names the variable and the value.
inline void expectInvalid(const std::string& name, const std::string& value) {
  INFO(name << "='" << value << "'");
  bool threw = false;
  try {
    parse(Env{{name, value}});
  } catch (const Error& e) {
    threw = true;
    std::string what = e.what();
    INFO("message: " << what);
    CHECK(e.code() == Errc::InvalidArgument);
    CHECK(contains(what, name));
    CHECK(contains(what, "'" + value + "'"));
  }
  CHECK(threw);
}

// The optional transports of this build, in registry order, less one.
inline std::vector<std::string> optionalNames(const std::string& less = "") {
  std::vector<std::string> v;
  for (const transport::Registration& r : transport::registry())
    if (r.optional && r.name != less) v.push_back(r.name);
  return v;
}

}  // namespace hora::test
