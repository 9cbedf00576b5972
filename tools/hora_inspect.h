// hora-inspect: reads the flight recorder's dumps of a job (one JSON file per process, written by
// the library on a failure, on SIGUSR1 or by horaCommDump) and says, per communicator, what each
// rank last completed, the call each one is in and what it waits for, the ranks in no call (busy
// in their own code, or gone) and calls that do not match across ranks. hora_inspect_json.cc
// reads JSON, hora_inspect_report.cc makes the report; hora-inspect (hora_inspect_main.cc) and
// hora-run --status (hora_run_status.cc) print it.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace hora::inspect {

// A JSON value: enough of JSON for the dumps (numbers as doubles: every number of a dump is an
// integer below 2^53).
struct Json {
  enum Type { Null, Bool, Number, String, Array, Object };
  Type type = Null;
  bool boolean = false;
  double number = 0;
  std::string text;
  std::vector<Json> items;                          // Array
  std::vector<std::pair<std::string, Json>> fields;  // Object, in order

  const Json* get(const std::string& key) const;  // an Object's field, or null
  int64_t integer(int64_t otherwise = 0) const { return type == Number ? static_cast<int64_t>(number) : otherwise; }
  std::string str() const { return type == String ? text : std::string(); }
};
// Parses text; false with *why on an error (the first one, with its offset).
bool parseJson(const std::string& text, Json* out, std::string* why);
// s as a JSON string, quoted.
std::string quote(const std::string& s);

// One recorded call of one rank.
struct Call {
  uint64_t seq = 0;
  uint64_t call = 0;  // the collective's number on its communicator (0: a send or receive)
  std::string collective, dtype, op, algorithm, state;
  uint64_t count = 0;
  int root = -1, peer = -1;
  int64_t started = 0, ended = 0;
  bool waiting = false;  // blocked, with what follows
  std::string waitOn;    // "message from", "message to", "shared stage"
  int waitRank = -1;
  uint32_t step = 0, steps = 0;
  int64_t waitSince = 0;
  std::string what() const;       // "AllReduce #1042" (or "Send to rank 2")
  std::string detail() const;     // "2 float, sum"
  std::string describe() const;   // "AllReduce of 2 float, sum": what must match across ranks
};

// One rank of one communicator, as its process's dump has it.
struct RankDump {
  int rank = -1;
  std::string host, file;
  int pid = 0;
  uint64_t processStart = 0;
  int64_t time = 0;  // when the dump was written (microseconds since the epoch)
  std::string state;  // the communicator's: initialising, ready, failed, aborted
  int errorCode = 0;
  std::string errorText;
  std::vector<Call> calls;  // oldest first
};

struct Peer {
  std::string host;
  int pid = 0;
};

struct Communicator {
  std::string commId, name;
  int nranks = 0;
  std::map<int, RankDump> ranks;  // the ranks that have a dump
  std::map<int, Peer> peers;      // every rank, as any dump names it
};

// Every communicator of the dumps in `paths` (files, or directories whose hora-dump.*.json files
// are read); unreadable files are named in *problems.
std::vector<Communicator> load(const std::vector<std::string>& paths, std::vector<std::string>* problems);

// How a process of this host is doing, from /proc: "state S (sleeping)", "gone", or "on host X"
// for another host. processStart (0: unknown) tells the process from a later one with its pid.
std::string processState(const std::string& host, int pid, uint64_t processStart);

// The report: text lines, or one JSON document.
std::string reportText(const std::vector<Communicator>& comms, const std::vector<std::string>& problems);
std::string reportJson(const std::vector<Communicator>& comms, const std::vector<std::string>& problems);

}  // namespace hora::inspect
