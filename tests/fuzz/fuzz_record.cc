// The peer record each rank sends every other at init (src/base/record.h), and the fields of it
// that comm.cc reads: "core" (FieldReader: magic, rank, pid, chunk bytes, hier stage, host name,
// host and machine identities) and "topo" (src/topo: the host's topology, then how hora-topo
// prints a job's hosts). The input is a record; it is also tried as a bare "core" and "topo"
// field, so that those are reached without a record around them.
//
// Invariants: a record that decodes re-encodes to the same bytes (the encoding is canonical),
// with at most kRecordMaxFields fields, valid unique names; one that does not leaves the output
// alone and says why. A field that reads as comm.cc reads it writes back to the same bytes with
// FieldWriter. A topology that decodes re-encodes to the same bytes and prints (JSON and text)
// without control characters; one that does not leaves the outputs alone and says why.
#include <cstdint>
#include <cstring>
#include <string>

#include "base/record.h"
#include "fuzz.h"
#include "topo/topology.h"

using namespace hora;

namespace {

bool printableLines(const std::string& s) {
  for (char c : s)
    if ((static_cast<unsigned char>(c) < 0x20 && c != '\n') || static_cast<unsigned char>(c) == 0x7f) return false;
  return true;
}

// comm.cc's "core" field, read as decodePeer reads it.
void core(const std::string& bytes) {
  FieldReader r(bytes);
  uint32_t magic = 0, rank = 0, pid = 0, hier = 0;
  uint64_t chunk = 0;
  std::string host, hostId, machineId;
  if (!r.u32(&magic) || !r.u32(&rank) || !r.u32(&pid) || !r.u64(&chunk) || !r.u32(&hier) || !r.str(&host, 255) ||
      !r.str(&hostId, 64) || !r.str(&machineId, 64)) {
    // A failed read ends the reader: nothing more comes out of it.
    uint32_t more = 7;
    FUZZ_CHECK(!r.u32(&more) && more == 7 && r.atEnd(), "a reader went on after a failed read");
    return;
  }
  FUZZ_CHECK(host.size() <= 255 && hostId.size() <= 64 && machineId.size() <= 64, "a string longer than its bound");
  if (!r.atEnd()) return;
  const std::string again =
      FieldWriter().u32(magic).u32(rank).u32(pid).u64(chunk).u32(hier).str(host).str(hostId).str(machineId).take();
  FUZZ_CHECK(again == bytes, "a core field reads back differently");
}

void topology(const std::string& bytes) {
  topo::Host host;
  host.name = "sentinel";
  topo::Place place;
  place.core = 12345;
  std::string why;
  if (!topo::decode(bytes, &host, &place, &why)) {
    FUZZ_CHECK(!why.empty(), "a malformed topology without a reason");
    FUZZ_CHECK(host.name == "sentinel" && host.nics.empty() && place.core == 12345,
               "a failed topology decode changed its outputs");
    return;
  }
  FUZZ_CHECK(topo::encode(host, place) == bytes, "a topology re-encodes differently");
  FUZZ_CHECK(host.nics.size() <= topo::kMaxDevices && host.gpus.size() <= topo::kMaxDevices &&
                 host.cacheBytes.size() <= topo::kMaxCacheLevels,
             "a topology beyond its bounds");
  std::vector<topo::HostEntry> job{{host, {0, 1}, {place, topo::Place{}}}};
  FUZZ_CHECK(printableLines(topo::toJson(job)) && printableLines(topo::toText(job)),
             "a peer's topology prints control characters");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  Record rec;
  rec.set("sentinel", "x");
  std::string why;
  if (Record::decode(bytes, &rec, &why)) {
    FUZZ_CHECK(rec.encode() == bytes, "a record re-encodes differently");
    FUZZ_CHECK(rec.fields().size() <= kRecordMaxFields, "a record of too many fields");
    for (size_t i = 0; i < rec.fields().size(); ++i) {
      const auto& [name, value] = rec.fields()[i];
      FUZZ_CHECK(!name.empty() && name.size() <= kRecordMaxName, "a field name of a bad length");
      for (char c : name) FUZZ_CHECK(c > 0x20 && c < 0x7f, "an unprintable field name");
      FUZZ_CHECK(rec.get(name) == &value, "a repeated field name");
      if (name == "core") core(value);
      if (name == "topo") topology(value);
    }
  } else {
    FUZZ_CHECK(!why.empty(), "a malformed record without a reason");
    FUZZ_CHECK(rec.fields().size() == 1 && rec.fields()[0].first == "sentinel", "a failed decode changed its output");
  }
  core(bytes);
  topology(bytes);
  return 0;
}
