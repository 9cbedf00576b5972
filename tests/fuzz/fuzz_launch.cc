// What a rank learns from its launcher's environment (src/comm/launch.h): parseLaunchEnv over
// NAME=VALUE lines, the secret it names (parseSecret), and Slurm host lists (firstSlurmHost,
// also given every value of the input).
//
// Invariants: a launch environment that parses gives a rank within 0..size-1 and a size within
// 1..2^20 from a named launcher, or neither (-1, -1, no launcher); without HORA_ID or a root it
// says what to set; anything else is Error(InvalidArgument) with a text. A secret that parses
// is the 64 hex digits it came from. A Slurm host list gives one non-empty host name without
// brackets, commas or blanks, or Error(InvalidArgument).
#include <cctype>
#include <string>

#include "comm/launch.h"
#include "env.h"
#include "fuzz.h"

using namespace hora;

namespace {

void slurmHost(const std::string& list) {
  std::string h;
  if (!fuzz::returnsOrFails([&] { h = firstSlurmHost(list); }, Errc::InvalidArgument)) return;
  FUZZ_CHECK(!h.empty(), "an empty host from '" + list + "'");
  for (char c : h)
    FUZZ_CHECK(c != '[' && c != ',' && !isspace(static_cast<unsigned char>(c)),
               "host '" + h + "' from '" + list + "'");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  const fuzz::Env env(text);
  for (const auto& kv : env.vars) slurmHost(kv.second);

  LaunchEnv l;
  if (!fuzz::returnsOrFails([&] { l = parseLaunchEnv(env.lookup()); }, Errc::InvalidArgument)) return 0;
  if (l.launcher.empty()) {
    FUZZ_CHECK(l.rank == -1 && l.size == -1, "a rank and size from no launcher");
  } else {
    FUZZ_CHECK(l.size >= 1 && l.size <= (1 << 20) && l.rank >= 0 && l.rank < l.size,
               "rank " + std::to_string(l.rank) + " of " + std::to_string(l.size) + " from " + l.launcher);
  }
  FUZZ_CHECK(!l.source.empty(), "no account of where the settings came from");
  if (l.idHex.empty() && l.root.empty()) FUZZ_CHECK(!l.rendezvousHint.empty(), "no rendezvous and no hint");

  Secret s{};
  if (!fuzz::returnsOrFails([&] { s = parseSecret(l); }, Errc::InvalidArgument)) return 0;
  static const char* digits = "0123456789abcdef";
  std::string hex;
  for (uint8_t b : s.bytes) {
    hex += digits[b >> 4];
    hex += digits[b & 15];
  }
  std::string given = l.secretHex;
  for (char& c : given) c = static_cast<char>(tolower(static_cast<unsigned char>(c)));
  FUZZ_CHECK(hex == given, "secret " + l.secretHex + " parsed as " + hex);
  return 0;
}
