// The library's settings (src/comm/config.h): parseConfig over an environment the input gives
// as NAME=VALUE lines, the names Hora does not know, and, when the first byte is '#', the input
// as a cost model file (HORA_TUNE_FILE, coll::parseCosts).
//
// Invariants: a configuration that parses holds every value within its documented range
// (timeout 1 ms..1 year, 1..16 sockets per peer, chunks of 4096..64M bytes, a non-empty subset
// of the built-in transports, a known log level and kernel ISA); anything else is
// Error(InvalidArgument) whose text names the HORA_ variable. Unknown names are reported only
// for HORA_ names Hora does not know. A cost model that parses holds finite values in range and
// prints as a file that parses back to the same model.
#include <algorithm>
#include <cmath>
#include <string>

#include "coll/cost.h"
#include "comm/config.h"
#include "env.h"
#include "fuzz.h"
#include "transports/registry.h"

using namespace hora;

namespace {

void costs(const std::string& text) {
  coll::Costs c;
  if (!fuzz::returnsOrFails([&] { c = coll::parseCosts(text, "fuzz"); }, Errc::InvalidArgument)) return;
  auto inRange = [](double v) { return std::isfinite(v) && v >= 0 && v < 1e9; };
  FUZZ_CHECK(inRange(c.stage.latencyUs) && inRange(c.stage.gbps) && c.stage.gbps > 0, "a stage cost out of range");
  FUZZ_CHECK(inRange(c.memoryGBps) && c.memoryGBps > 0 && inRange(c.oversubscribedUs), "a cost out of range");
  for (const auto& [name, l] : c.links) FUZZ_CHECK(inRange(l.latencyUs) && inRange(l.gbps) && l.gbps > 0, name);
  for (const auto& [name, us] : c.baseUs) FUZZ_CHECK(inRange(us), name);
  for (const auto& [name, f] : c.byteFactor) FUZZ_CHECK(inRange(f) && f > 0, name);
  const std::string printed = coll::formatCosts(c);
  coll::Costs again;
  FUZZ_CHECK(fuzz::returnsOrFails([&] { again = coll::parseCosts(printed, "printed"); }),
             "a printed cost model does not parse: " + printed);
  FUZZ_CHECK(coll::formatCosts(again) == printed, "a printed cost model parses to another model");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  if (!text.empty() && text[0] == '#') {
    costs(text);
    return 0;
  }
  const fuzz::Env env(text);
  for (const std::string& u : unknownVariables(env.names)) {
    const std::string name = u.substr(0, u.find(" (did you mean"));
    FUZZ_CHECK(name.compare(0, 5, "HORA_") == 0 && std::find(env.names.begin(), env.names.end(), name) != env.names.end(),
               "an unknown variable that was not given: " + u);
    FUZZ_CHECK(name != "HORA_DEBUG" && name != "HORA_ALGO" && name != "HORA_ID", "a known variable called unknown");
  }

  Config c;
  try {
    c = parseConfig(env.lookup());
  } catch (const Error& e) {
    FUZZ_CHECK(e.code() == Errc::InvalidArgument && std::string(e.what()).find("HORA_") != std::string::npos,
               std::string("a configuration error that names no variable: ") + e.what());
    return 0;
  } catch (...) {
    fuzz::bug("parseConfig threw something other than hora::Error");
  }
  FUZZ_CHECK(c.timeout.count() >= 1 && c.timeout.count() <= 365LL * 24 * 3600 * 1000, "a timeout out of range");
  FUZZ_CHECK(c.nsocksPerPeer >= 1 && c.nsocksPerPeer <= 16, "sockets per peer out of range");
  FUZZ_CHECK(c.chunkBytes >= 4096 && c.chunkBytes <= (64u << 20), "a chunk size out of range");
  FUZZ_CHECK(static_cast<int>(c.debugLevel) >= 0 && static_cast<int>(c.debugLevel) <= 3, "a bad log level");
  FUZZ_CHECK(c.kernelIsa == "auto" || c.kernelIsa == "scalar" || c.kernelIsa == "avx2" || c.kernelIsa == "avx512");
  FUZZ_CHECK(!c.transports.empty(), "no transport left");
  for (const std::string& t : c.transports) {
    bool known = false;
    for (const transport::Registration& r : transport::registry()) known |= r.optional && t == r.name;
    FUZZ_CHECK(known, "an unknown transport: " + t);
  }

  return 0;
}
