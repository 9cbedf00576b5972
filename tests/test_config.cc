// Tests of the configuration parser (comm/config.h) with a fake environment: defaults, every
// variable's valid forms, every invalid value rejected with InvalidArgument naming the
// variable and the value, and the detection of misspelt HORA_* names.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "base/error.h"
#include "comm/config.h"
#include "fake_env.h"
#include "transports/registry.h"

using namespace hora;

namespace {

using test::Env;
using test::lookup;
using test::contains;

Config parse(const Env& env) { return parseConfig(lookup(env)); }

// Parses and expects InvalidArgument whose message names the variable and the value.
void expectInvalid(const std::string& name, const std::string& value) {
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
std::vector<std::string> optionalNames(const std::string& less = "") {
  std::vector<std::string> v;
  for (const transport::Registration& r : transport::registry())
    if (r.optional && r.name != less) v.push_back(r.name);
  return v;
}

}  // namespace

TEST_CASE("config: defaults", "[config]") {
  Config c = parse({});
  CHECK(c.debugLevel == log::Level::Warn);
  CHECK(c.debugSubsys == log::kAll);
  CHECK(c.timeout == std::chrono::milliseconds(600000));
  CHECK(c.socketIfname.empty());
  CHECK(c.transports == optionalNames());
  CHECK(c.algo == "auto");
  CHECK(c.nsocksPerPeer == 2);  // measured: a MiB each way at once goes faster over two
  CHECK(c.chunkBytes == 512 * 1024);
  CHECK(c.kernelIsa == "auto");
  // Unrelated variables change nothing.
  Config d = parse({{"PATH", "/bin"}, {"HORA_UNKNOWN_THING", "1"}});
  CHECK(d.nsocksPerPeer == c.nsocksPerPeer);
  CHECK(d.timeout == c.timeout);
}

TEST_CASE("config: HORA_DEBUG", "[config]") {
  CHECK(parse({{"HORA_DEBUG", "NONE"}}).debugLevel == log::Level::None);
  CHECK(parse({{"HORA_DEBUG", "warn"}}).debugLevel == log::Level::Warn);
  CHECK(parse({{"HORA_DEBUG", "Info"}}).debugLevel == log::Level::Info);
  CHECK(parse({{"HORA_DEBUG", "tRaCe"}}).debugLevel == log::Level::Trace);
  CHECK(parse({{"HORA_DEBUG", "  info  "}}).debugLevel == log::Level::Info);
  for (const char* bad : {"VERBOSE", "2", "INFOX", "IN FO", "all"}) expectInvalid("HORA_DEBUG", bad);
}

TEST_CASE("config: HORA_DEBUG_SUBSYS", "[config]") {
  CHECK(parse({{"HORA_DEBUG_SUBSYS", "INIT"}}).debugSubsys == log::kInit);
  CHECK(parse({{"HORA_DEBUG_SUBSYS", "net,coll"}}).debugSubsys == (log::kNet | log::kColl));
  CHECK(parse({{"HORA_DEBUG_SUBSYS", " Bootstrap , ENV "}}).debugSubsys == (log::kBootstrap | log::kEnv));
  CHECK(parse({{"HORA_DEBUG_SUBSYS", "ALL"}}).debugSubsys == log::kAll);
  CHECK(parse({{"HORA_DEBUG_SUBSYS", "^NET"}}).debugSubsys == (log::kAll & ~uint32_t(log::kNet)));
  CHECK(parse({{"HORA_DEBUG_SUBSYS", "^net,^coll"}}).debugSubsys ==
        (log::kAll & ~uint32_t(log::kNet | log::kColl)));
  CHECK(parse({{"HORA_DEBUG_SUBSYS", "INIT,NET,^NET"}}).debugSubsys == log::kInit);
  CHECK(parse({{"HORA_DEBUG_SUBSYS", "ALL,^INIT"}}).debugSubsys == (log::kAll & ~uint32_t(log::kInit)));
  for (const char* bad : {"", "NETWORK", "INIT,FOO", "^", "^BAR", ",,"}) expectInvalid("HORA_DEBUG_SUBSYS", bad);
}

TEST_CASE("config: HORA_DEBUG_FILE", "[config]") {
  CHECK(parse({}).debugFile.empty());
  // Kept as given: the log expands %h and %p when it opens the file (test_log.cc).
  CHECK(parse({{"HORA_DEBUG_FILE", "/tmp/hora.%h.%p"}}).debugFile == "/tmp/hora.%h.%p");
  for (const char* bad : {"", "  "}) expectInvalid("HORA_DEBUG_FILE", bad);
}

TEST_CASE("config: HORA_TIMEOUT_MS", "[config]") {
  CHECK(parse({{"HORA_TIMEOUT_MS", "1"}}).timeout == std::chrono::milliseconds(1));
  CHECK(parse({{"HORA_TIMEOUT_MS", "5000"}}).timeout == std::chrono::milliseconds(5000));
  CHECK(parse({{"HORA_TIMEOUT_MS", " 250 "}}).timeout == std::chrono::milliseconds(250));
  CHECK(parse({{"HORA_TIMEOUT_MS", "31536000000"}}).timeout == std::chrono::milliseconds(31536000000LL));
  for (const char* bad : {"0", "-5", "abc", "10s", "1.5", "", "31536000001", "99999999999999999999999"})
    expectInvalid("HORA_TIMEOUT_MS", bad);
}

TEST_CASE("config: HORA_SOCKET_IFNAME", "[config]") {
  CHECK(parse({{"HORA_SOCKET_IFNAME", "eth0"}}).socketIfname == "eth0");
  CHECK(parse({{"HORA_SOCKET_IFNAME", " =ib0,^docker "}}).socketIfname == "=ib0,^docker");
  for (const char* bad : {"", " ", ",", " , "}) expectInvalid("HORA_SOCKET_IFNAME", bad);
}

TEST_CASE("config: HORA_NSOCKS_PERPEER", "[config]") {
  for (int n = 1; n <= 16; ++n)
    CHECK(parse({{"HORA_NSOCKS_PERPEER", std::to_string(n)}}).nsocksPerPeer == n);
  for (const char* bad : {"0", "17", "-1", "two", "", "2x", "1e1"}) expectInvalid("HORA_NSOCKS_PERPEER", bad);
}

TEST_CASE("config: HORA_CHUNK_BYTES", "[config]") {
  CHECK(parse({{"HORA_CHUNK_BYTES", "4096"}}).chunkBytes == 4096);
  CHECK(parse({{"HORA_CHUNK_BYTES", "4K"}}).chunkBytes == 4096);
  CHECK(parse({{"HORA_CHUNK_BYTES", "4k"}}).chunkBytes == 4096);
  CHECK(parse({{"HORA_CHUNK_BYTES", "128K"}}).chunkBytes == 128 * 1024);
  CHECK(parse({{"HORA_CHUNK_BYTES", "1M"}}).chunkBytes == 1024 * 1024);
  CHECK(parse({{"HORA_CHUNK_BYTES", "64M"}}).chunkBytes == 64u << 20);
  CHECK(parse({{"HORA_CHUNK_BYTES", "67108864"}}).chunkBytes == 64u << 20);
  CHECK(parse({{"HORA_CHUNK_BYTES", " 8K "}}).chunkBytes == 8192);
  for (const char* bad : {"4095", "3K", "65M", "67108865", "1G", "0", "", "4KB", "four", "0K", "-4096"})
    expectInvalid("HORA_CHUNK_BYTES", bad);
}

// Regression: when the value had a K/M suffix and its number part was malformed or out of the
// integer parser's range, the error names the value without its suffix (e.g.
// HORA_CHUNK_BYTES='x' for HORA_CHUNK_BYTES=xK, or '9999999999' for 9999999999K): parseBytes
// passes the stripped text to parseInt, which reports that instead of the variable's value.
TEST_CASE("config: HORA_CHUNK_BYTES errors quote the whole value", "[config]") {
  for (const char* bad : {"xK", "9999999999K", "-1M", "1.5M", "K"}) expectInvalid("HORA_CHUNK_BYTES", bad);
}

TEST_CASE("config: HORA_TRANSPORTS", "[config]") {
  CHECK(parse({{"HORA_TRANSPORTS", "tcp"}}).transports == std::vector<std::string>{"tcp"});
  CHECK(parse({{"HORA_TRANSPORTS", " tcp , tcp "}}).transports == std::vector<std::string>{"tcp"});
  CHECK(parse({{"HORA_TRANSPORTS", "shm"}}).transports == std::vector<std::string>{"shm"});
  CHECK(parse({{"HORA_TRANSPORTS", "^shm"}}).transports == optionalNames("shm"));
  CHECK(parse({{"HORA_TRANSPORTS", "^tcp"}}).transports == optionalNames("tcp"));
  CHECK(parse({{"HORA_TRANSPORTS", "tcp,shm"}}).transports == (std::vector<std::string>{"shm", "tcp"}));
  for (const char* bad : {"nvlink", "tcp,nvlink", "^nvlink", "^", "TCPX", ""}) expectInvalid("HORA_TRANSPORTS", bad);
  // Excluding every transport leaves nothing: an error that says so.
  std::string all;
  for (const std::string& n : optionalNames()) all += (all.empty() ? "^" : ",^") + n;
  for (const std::string& nothingLeft : {all, std::string("tcp,^tcp")}) {
    INFO(nothingLeft);
    try {
      parse({{"HORA_TRANSPORTS", nothingLeft.c_str()}});
      FAIL("no error");
    } catch (const Error& e) {
      CHECK(e.code() == Errc::InvalidArgument);
      CHECK(contains(e.what(), "HORA_TRANSPORTS"));
      CHECK(contains(e.what(), nothingLeft));
      CHECK(contains(e.what(), "at least one"));
    }
  }
}

TEST_CASE("config: HORA_ALGO and HORA_KERNEL_ISA", "[config]") {
  CHECK(parse({{"HORA_ALGO", "auto"}}).algo == "auto");
  CHECK(parse({{"HORA_ALGO", "RING"}}).algo == "ring");
  CHECK(parse({{"HORA_ALGO", " Ring "}}).algo == "ring");
  // A name forces that algorithm for every collective that has it; collective:name for one.
  CHECK(parse({{"HORA_ALGO", "ring"}}).algoForced[static_cast<size_t>(coll::Kind::AllGather)] ==
        static_cast<int>(coll::Algo::Ring));
  CHECK(parse({{"HORA_ALGO", "ring"}}).algoForced[static_cast<size_t>(coll::Kind::Broadcast)] == -1);
  const Config c = parse({{"HORA_ALGO", "allreduce:slice, Broadcast:chain"}});
  CHECK(c.algoForced[static_cast<size_t>(coll::Kind::AllReduce)] == static_cast<int>(coll::Algo::Slice));
  CHECK(c.algoForced[static_cast<size_t>(coll::Kind::Broadcast)] == static_cast<int>(coll::Algo::Chain));
  CHECK(c.algoForced[static_cast<size_t>(coll::Kind::Reduce)] == -1);
  for (const char* bad : {"trees", "", "rings", "allgather:tree", "p2p", "broadcast:ring", "allreduce:", "gather:ring", ","})
    expectInvalid("HORA_ALGO", bad);
  // The error names what is available.
  try {
    parse({{"HORA_ALGO", "broadcast:ring"}});
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("flat, chain") != std::string::npos);
  }
  try {
    parse({{"HORA_ALGO", "trees"}});
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("flat, slice, rd, ring, direct, chain") != std::string::npos);
  }

  for (const char* isa : {"auto", "scalar", "avx2", "avx512"}) CHECK(parse({{"HORA_KERNEL_ISA", isa}}).kernelIsa == isa);
  CHECK(parse({{"HORA_KERNEL_ISA", "AVX2"}}).kernelIsa == "avx2");
  for (const char* bad : {"sse", "", "avx", "neon", "avx-512"}) expectInvalid("HORA_KERNEL_ISA", bad);
}

TEST_CASE("config: all variables at once", "[config]") {
  Config c = parse({{"HORA_DEBUG", "TRACE"},
                    {"HORA_DEBUG_SUBSYS", "COLL"},
                    {"HORA_TIMEOUT_MS", "1234"},
                    {"HORA_SOCKET_IFNAME", "lo"},
                    {"HORA_TRANSPORTS", "tcp"},
                    {"HORA_ALGO", "ring"},
                    {"HORA_NSOCKS_PERPEER", "4"},
                    {"HORA_CHUNK_BYTES", "256K"},
                    {"HORA_KERNEL_ISA", "scalar"}});
  CHECK(c.debugLevel == log::Level::Trace);
  CHECK(c.debugSubsys == log::kColl);
  CHECK(c.timeout == std::chrono::milliseconds(1234));
  CHECK(c.socketIfname == "lo");
  CHECK(c.algo == "ring");
  CHECK(c.nsocksPerPeer == 4);
  CHECK(c.chunkBytes == 256 * 1024);
  CHECK(c.kernelIsa == "scalar");
}

// ---- unknown variables -------------------------------------------------------------------------

TEST_CASE("unknownVariables: misspellings are flagged with a suggestion", "[config]") {
  std::vector<std::string> u = unknownVariables({"HORA_TIMOUT_MS"});
  REQUIRE(u.size() == 1);
  CHECK(contains(u[0], "HORA_TIMOUT_MS"));
  CHECK(contains(u[0], "did you mean HORA_TIMEOUT_MS?"));

  u = unknownVariables({"HORA_NSOCK_PERPEER", "HORA_CHUNKBYTES", "HORA_DEBUG_SUBSYSTEM"});
  REQUIRE(u.size() == 3);
  CHECK(contains(u[0], "HORA_NSOCKS_PERPEER"));
  CHECK(contains(u[1], "HORA_CHUNK_BYTES"));
  CHECK(u[2].find("HORA_DEBUG_SUBSYSTEM") == 0);

  // A renamed variable: flagged with its new name.
  u = unknownVariables({"HORA_CUDA_STAGE_CHUNK"});
  REQUIRE(u.size() == 1);
  CHECK(contains(u[0], "renamed HORA_CUDA_BOUNCE_CHUNK"));

  // Far from every known name: flagged without a suggestion.
  u = unknownVariables({"HORA_COMPLETELY_DIFFERENT"});
  REQUIRE(u.size() == 1);
  CHECK(u[0] == "HORA_COMPLETELY_DIFFERENT");
}

TEST_CASE("unknownVariables: known names and non-HORA names are not flagged", "[config]") {
  const std::vector<std::string> known = {
      "HORA_DEBUG",      "HORA_DEBUG_SUBSYS", "HORA_DEBUG_FILE",     "HORA_TIMEOUT_MS",    "HORA_SOCKET_IFNAME",
      "HORA_TRANSPORTS", "HORA_ALGO",         "HORA_NSOCKS_PERPEER", "HORA_CHUNK_BYTES",   "HORA_KERNEL_ISA",
      "HORA_RANK",       "HORA_SIZE",         "HORA_LOCAL_RANK",     "HORA_LOCAL_SIZE",    "HORA_ID",
      "HORA_ROOT",       "HORA_SECRET",       "HORA_RUN_GRACE_S",    "HORA_RUN_BIND",      "HORA_RUN_CPU_CLAIMS",
  };
  CHECK(unknownVariables(known).empty());
  CHECK(unknownVariables({"PATH", "HOME", "NCCL_DEBUG", "HORA", "hora_debug", "XHORA_DEBUG", "RANK"}).empty());
  std::vector<std::string> mixed = {"PATH", "HORA_DEBUG", "HORA_DEBUGG", "SLURM_PROCID"};
  std::vector<std::string> u = unknownVariables(mixed);
  REQUIRE(u.size() == 1);
  CHECK(contains(u[0], "HORA_DEBUGG"));
}

TEST_CASE("config: the ib transport's variables", "[config]") {
  const Config d = parse({});
  CHECK(d.ibHca.empty());
  CHECK(d.ibGidIndex == -1);
  CHECK(d.ibQpsPerPeer == 1);
  const Config c = parse({{"HORA_IB_HCA", " mlx5_0:1,^x "}, {"HORA_IB_GID_INDEX", "3"}, {"HORA_IB_QPS_PER_PEER", "4"}});
  CHECK(c.ibHca == "mlx5_0:1,^x");  // kept as given: the ib transport parses it (test_ib_hca)
  CHECK(c.ibGidIndex == 3);
  CHECK(c.ibQpsPerPeer == 4);
  for (const char* bad : {"-1", "256", "x", "", "1.5"}) expectInvalid("HORA_IB_GID_INDEX", bad);
  for (const char* bad : {"0", "17", "two", ""}) expectInvalid("HORA_IB_QPS_PER_PEER", bad);
}

TEST_CASE("config: HORA_CUDA, HORA_CUDA_IPC and HORA_CUDA_STREAM_WAIT", "[config]") {
  const Config d = parse({});
  CHECK(d.cuda == "auto");
  CHECK(d.cudaIpc);
  for (const char* m : {"auto", "off", "emulate"}) CHECK(parse({{"HORA_CUDA", m}}).cuda == m);
  CHECK(parse({{"HORA_CUDA", " off "}}).cuda == "off");
  CHECK_FALSE(parse({{"HORA_CUDA_IPC", "0"}}).cudaIpc);
  CHECK(parse({{"HORA_CUDA", "Emulate"}}).cuda == "emulate");
  for (const char* bad : {"on", "1", "", "emulated", "gpu"}) expectInvalid("HORA_CUDA", bad);
  for (const char* bad : {"2", "yes", "", "-1"}) expectInvalid("HORA_CUDA_IPC", bad);
  CHECK_FALSE(parse({}).cudaWaitKernel);
  CHECK(parse({{"HORA_CUDA_STREAM_WAIT", "Kernel"}}).cudaWaitKernel);
  CHECK_FALSE(parse({{"HORA_CUDA_STREAM_WAIT", " memop"}}).cudaWaitKernel);
  for (const char* bad : {"", "poll", "1"}) expectInvalid("HORA_CUDA_STREAM_WAIT", bad);
}

// ---- NCCL's variables --------------------------------------------------------------------------

namespace {

bool noted(const Config& c, const std::string& part) {
  for (const std::string& n : c.ncclNotes)
    if (contains(n, part)) return true;
  return false;
}

bool warned(const Config& c, const std::string& part) {
  for (const std::string& w : c.ncclWarnings)
    if (contains(w, part)) return true;
  return false;
}

int forced(const Config& c, coll::Kind k) { return c.algoForced[static_cast<size_t>(k)]; }
const int kRing = static_cast<int>(coll::Algo::Ring), kTree = static_cast<int>(coll::Algo::Tree);

bool ibBuilt() {
  const std::vector<std::string> all = optionalNames();
  return std::find(all.begin(), all.end(), "ib") != all.end();
}

}  // namespace

TEST_CASE("config: the table of NCCL's variables", "[config][nccl]") {
  std::map<std::string, std::string> readAs;  // NCCL name -> HORA name ("" ignored)
  for (const NcclVariables& v : ncclVariables()) {
    CHECK_FALSE(v.nccl.empty());
    CHECK_FALSE(v.note.empty());
    for (const std::string& n : v.nccl) {
      INFO(n);
      CHECK(n.rfind("NCCL_", 0) == 0);
      CHECK(readAs.count(n) == 0);  // each NCCL name in one row
      readAs[n] = v.hora;
    }
  }
  const std::map<std::string, std::string> expected = {
      {"NCCL_DEBUG", "HORA_DEBUG"},
      {"NCCL_DEBUG_SUBSYS", "HORA_DEBUG_SUBSYS"},
      {"NCCL_DEBUG_FILE", "HORA_DEBUG_FILE"},
      {"NCCL_SOCKET_IFNAME", "HORA_SOCKET_IFNAME"},
      {"NCCL_IB_HCA", "HORA_IB_HCA"},
      {"NCCL_IB_GID_INDEX", "HORA_IB_GID_INDEX"},
      {"NCCL_IB_QPS_PER_CONNECTION", "HORA_IB_QPS_PER_PEER"},
      {"NCCL_SOCKET_NTHREADS", "HORA_NSOCKS_PERPEER"},
      {"NCCL_NSOCKS_PERTHREAD", "HORA_NSOCKS_PERPEER"},
      {"NCCL_IB_DISABLE", "HORA_TRANSPORTS"},
      {"NCCL_SHM_DISABLE", "HORA_TRANSPORTS"},
      {"NCCL_NET", "HORA_TRANSPORTS"},
      {"NCCL_ALGO", "HORA_ALGO"},
      {"NCCL_COMM_BLOCKING", "HORA_COMM_BLOCKING"},
      {"NCCL_P2P_DISABLE", "HORA_CUDA_IPC"},
      {"NCCL_BUFFSIZE", ""},
      {"NCCL_CHUNK_SIZE", ""},
      {"NCCL_PROTO", ""},
      {"NCCL_TOPO_FILE", ""},
  };
  for (const auto& [nccl, hora] : expected) {
    INFO(nccl);
    REQUIRE(readAs.count(nccl) == 1);
    CHECK(readAs[nccl] == hora);
  }
  // Every HORA_* variable a row names is a known one.
  for (const auto& [nccl, hora] : readAs)
    if (!hora.empty()) CHECK(unknownVariables({hora}).empty());
  // Set NCCL_* variables that Hora does not read, known or not, in the order given.
  CHECK(unreadNcclVariables({"PATH", "NCCL_DEBUG", "NCCL_PROTO", "NCCL_SOME_NEW_THING", "HORA_DEBUG", "NCCL_BUFFSIZE",
                             "NCCL_IB_HCA", "NCCL_PROTO"}) ==
        (std::vector<std::string>{"NCCL_PROTO", "NCCL_SOME_NEW_THING", "NCCL_BUFFSIZE"}));
  CHECK(unreadNcclVariables({"NCCL_SOCKET_NTHREADS", "NCCL_NET", "NCCL_COMM_BLOCKING"}).empty());
  // NCCL's variables are never called unknown HORA_* ones.
  CHECK(unknownVariables({"NCCL_DEBUG", "NCCL_PROTO"}).empty());
}

TEST_CASE("config: NCCL_DEBUG", "[config][nccl]") {
  CHECK(parse({{"NCCL_DEBUG", "WARN"}}).debugLevel == log::Level::Warn);
  CHECK(parse({{"NCCL_DEBUG", "info"}}).debugLevel == log::Level::Info);
  CHECK(parse({{"NCCL_DEBUG", "Trace"}}).debugLevel == log::Level::Trace);
  CHECK(parse({{"NCCL_DEBUG", "NONE"}}).debugLevel == log::Level::None);
  CHECK(parse({{"NCCL_DEBUG", "ABORT"}}).debugLevel == log::Level::Warn);
  // VERSION: NCCL prints its version and nothing else; Hora warns and writes its banner.
  const Config v = parse({{"NCCL_DEBUG", "version"}});
  CHECK(v.debugLevel == log::Level::Warn);
  CHECK(v.debugVersion);
  CHECK(noted(v, "NCCL_DEBUG='version' read as HORA_DEBUG=WARN (and the version banner)"));
  CHECK_FALSE(parse({{"NCCL_DEBUG", "WARN"}}).debugVersion);
  // Which variable it came from, at INFO.
  const Config i = parse({{"NCCL_DEBUG", "info"}});
  CHECK(noted(i, "NCCL_DEBUG='info' read as HORA_DEBUG=INFO"));
  CHECK(i.ncclSource.at("HORA_DEBUG") == "NCCL_DEBUG");
  CHECK(i.ncclWarnings.empty());
  // HORA_DEBUG wins, and says so.
  const Config both = parse({{"HORA_DEBUG", "TRACE"}, {"NCCL_DEBUG", "VERSION"}});
  CHECK(both.debugLevel == log::Level::Trace);
  CHECK_FALSE(both.debugVersion);
  CHECK(noted(both, "NCCL_DEBUG='VERSION' is overridden by HORA_DEBUG='TRACE'"));
  CHECK(both.ncclSource.count("HORA_DEBUG") == 0);
  // An NCCL value Hora cannot take is a warning, never an error; an invalid HORA_* one still fails.
  const Config bad = parse({{"NCCL_DEBUG", "VERBOSE"}});
  CHECK(bad.debugLevel == log::Level::Warn);
  CHECK(warned(bad, "NCCL_DEBUG='VERBOSE' is ignored"));
  CHECK_THROWS_AS(parse({{"HORA_DEBUG", "VERBOSE"}, {"NCCL_DEBUG", "INFO"}}), Error);
  // Blank is unset, as NCCL takes it.
  const Config blank = parse({{"NCCL_DEBUG", " "}});
  CHECK(blank.ncclNotes.empty());
  CHECK(blank.ncclWarnings.empty());
  // Nothing NCCL: nothing said.
  CHECK(parse({}).ncclNotes.empty());
}

TEST_CASE("config: NCCL_DEBUG=VERSION's banner at WARN", "[config][nccl]") {
  char path[] = "/tmp/hora-test-config-XXXXXX";
  const int fd = mkstemp(path);
  REQUIRE(fd >= 0);
  close(fd);
  REQUIRE(log::toFile(path) == "");
  log::setBanner("Hora 9.9.9 (config test)");
  log::configure(log::Level::Warn, log::kAll);
  log::writeBanner();  // INFO is off: nothing
  log::writeBanner(true);  // NCCL_DEBUG=VERSION
  log::writeBanner(true);  // once
  log::toStderr();
  std::string text;
  if (FILE* f = fopen(path, "r")) {
    char buf[4096];
    for (size_t n; (n = fread(buf, 1, sizeof buf, f)) > 0;) text.append(buf, n);
    fclose(f);
  }
  unlink(path);
  CHECK(std::count(text.begin(), text.end(), '\n') == 1);
  CHECK(contains(text, "Hora 9.9.9 (config test)"));
}

TEST_CASE("config: NCCL_DEBUG_SUBSYS", "[config][nccl]") {
  const uint32_t all = log::kAll;
  CHECK(parse({{"NCCL_DEBUG_SUBSYS", "INIT,COLL"}}).debugSubsys == (log::kInit | log::kColl));
  CHECK(parse({{"NCCL_DEBUG_SUBSYS", "init,bootstrap,env"}}).debugSubsys == (log::kInit | log::kBootstrap | log::kEnv));
  CHECK(parse({{"NCCL_DEBUG_SUBSYS", "ALL"}}).debugSubsys == all);
  // NCCL's ^ excludes the whole list (Hora's each name it is on).
  CHECK(parse({{"NCCL_DEBUG_SUBSYS", "^INIT,COLL"}}).debugSubsys == (all & ~uint32_t(log::kInit | log::kColl)));
  CHECK(parse({{"NCCL_DEBUG_SUBSYS", "^ALL"}}).debugSubsys == 0);
  // NCCL's finer subsystems: included as Hora's broader one; excluded only with it.
  const Config p2p = parse({{"NCCL_DEBUG_SUBSYS", "P2P,SHM"}});
  CHECK(p2p.debugSubsys == log::kNet);
  CHECK(noted(p2p, "P2P as NET"));
  CHECK(parse({{"NCCL_DEBUG_SUBSYS", "INIT,TUNING,GRAPH"}}).debugSubsys == (log::kInit | log::kColl));
  const Config notP2p = parse({{"NCCL_DEBUG_SUBSYS", "^P2P,INIT"}});
  CHECK(notP2p.debugSubsys == (all & ~uint32_t(log::kInit)));
  CHECK(noted(notP2p, "^P2P left out"));
  // Subsystems Hora does not have: an INFO note; names NCCL does not know: a warning.
  const Config alloc = parse({{"NCCL_DEBUG_SUBSYS", "INIT,ALLOC,PROXY"}});
  CHECK(alloc.debugSubsys == log::kInit);
  CHECK(noted(alloc, "ALLOC, PROXY: no such subsystems in Hora, ignored"));
  CHECK(alloc.ncclWarnings.empty());
  const Config typo = parse({{"NCCL_DEBUG_SUBSYS", "INIT,NETT"}});
  CHECK(typo.debugSubsys == log::kInit);
  CHECK(warned(typo, "NCCL_DEBUG_SUBSYS='INIT,NETT': NETT is not one of NCCL's subsystems; it is ignored"));
  const Config none = parse({{"NCCL_DEBUG_SUBSYS", "NETWORK"}});
  CHECK(none.debugSubsys == all);
  CHECK(warned(none, "NCCL_DEBUG_SUBSYS='NETWORK' is ignored"));
  // HORA_DEBUG_SUBSYS wins.
  const Config both = parse({{"HORA_DEBUG_SUBSYS", "NET"}, {"NCCL_DEBUG_SUBSYS", "INIT"}});
  CHECK(both.debugSubsys == log::kNet);
  CHECK(noted(both, "NCCL_DEBUG_SUBSYS='INIT' is overridden by HORA_DEBUG_SUBSYS='NET'"));
}

TEST_CASE("config: NCCL_DEBUG_FILE", "[config][nccl]") {
  const Config c = parse({{"NCCL_DEBUG_FILE", "/tmp/nccl.%h.%p"}});
  CHECK(c.debugFile == "/tmp/nccl.%h.%p");
  CHECK(c.ncclSource.at("HORA_DEBUG_FILE") == "NCCL_DEBUG_FILE");
  CHECK(parse({{"HORA_DEBUG_FILE", "/tmp/h"}, {"NCCL_DEBUG_FILE", "/tmp/n"}}).debugFile == "/tmp/h");
  CHECK(parse({{"NCCL_DEBUG_FILE", "  "}}).debugFile.empty());
}

TEST_CASE("config: NCCL_SOCKET_IFNAME", "[config][nccl]") {
  CHECK(parse({{"NCCL_SOCKET_IFNAME", "eth"}}).socketIfname == "eth");
  CHECK(parse({{"NCCL_SOCKET_IFNAME", "=eth0,eth1"}}).socketIfname == "=eth0,=eth1");
  CHECK(parse({{"NCCL_SOCKET_IFNAME", "^docker,lo"}}).socketIfname == "^docker,^lo");
  CHECK(parse({{"NCCL_SOCKET_IFNAME", "ib0:1,ib1"}}).socketIfname == "ib0,ib1");  // NCCL drops a port
  // ^ and = later in the list are names to NCCL, which no interface has.
  const Config later = parse({{"NCCL_SOCKET_IFNAME", "eth0,^docker"}});
  CHECK(later.socketIfname == "eth0");
  CHECK(noted(later, "NCCL_SOCKET_IFNAME='eth0,^docker' read as HORA_SOCKET_IFNAME=eth0"));
  // Excluding exact names has no Hora form: ignored, with a warning.
  const Config exact = parse({{"NCCL_SOCKET_IFNAME", "^=docker0"}});
  CHECK(exact.socketIfname.empty());
  CHECK(warned(exact, "NCCL_SOCKET_IFNAME='^=docker0' is ignored"));
  for (const char* bad : {"^", ",", "=", "^=", ":1"}) {
    INFO(bad);
    const Config b = parse({{"NCCL_SOCKET_IFNAME", bad}});
    CHECK(b.socketIfname.empty());
    CHECK(warned(b, "NCCL_SOCKET_IFNAME='" + std::string(bad) + "' is ignored"));
  }
  const Config both = parse({{"HORA_SOCKET_IFNAME", "lo"}, {"NCCL_SOCKET_IFNAME", "eth0"}});
  CHECK(both.socketIfname == "lo");
  CHECK(noted(both, "NCCL_SOCKET_IFNAME='eth0' is overridden by HORA_SOCKET_IFNAME='lo'"));
}

TEST_CASE("config: NCCL_IB_DISABLE, NCCL_SHM_DISABLE and NCCL_NET", "[config][nccl]") {
  CHECK(parse({{"NCCL_SHM_DISABLE", "1"}}).transports == optionalNames("shm"));
  CHECK(parse({{"NCCL_SHM_DISABLE", "0"}}).transports == optionalNames());
  CHECK(parse({{"NCCL_IB_DISABLE", "1"}}).transports == optionalNames("ib"));
  CHECK(parse({{"NCCL_IB_DISABLE", "0"}}).transports == optionalNames());
  CHECK(parse({{"NCCL_NET", "Socket"}}).transports == optionalNames("ib"));
  CHECK(parse({{"NCCL_NET", "socket"}, {"NCCL_SHM_DISABLE", "1"}}).transports ==
        std::vector<std::string>{"tcp"});
  const Config ib = parse({{"NCCL_NET", "IB"}});
  if (ibBuilt()) {
    CHECK(ib.transports == optionalNames("tcp"));
    const Config both = parse({{"NCCL_NET", "IB"}, {"NCCL_IB_DISABLE", "1"}});
    CHECK(both.transports == optionalNames("ib"));
    CHECK(warned(both, "NCCL_NET='IB' is ignored: NCCL_IB_DISABLE leaves ib out"));
  } else {
    CHECK(ib.transports == optionalNames());
    CHECK(warned(ib, "NCCL_NET='IB' is ignored: this build has no ib transport"));
  }
  const Config plugin = parse({{"NCCL_NET", "AWS Libfabric"}});
  CHECK(plugin.transports == optionalNames());
  CHECK(warned(plugin, "NCCL_NET='AWS Libfabric' is ignored"));
  const Config shm = parse({{"NCCL_SHM_DISABLE", "1"}});
  CHECK(noted(shm, "NCCL_SHM_DISABLE='1' read as HORA_TRANSPORTS="));
  for (const auto& [name, bad] : std::vector<std::pair<std::string, std::string>>{
           {"NCCL_SHM_DISABLE", "yes"}, {"NCCL_SHM_DISABLE", "2"}, {"NCCL_IB_DISABLE", "true"}}) {
    INFO(name << "=" << bad);
    const Config b = parse({{name, bad}});
    CHECK(b.transports == optionalNames());
    CHECK(warned(b, name + "='" + bad + "' is ignored"));
  }
  // HORA_TRANSPORTS wins over all three.
  const Config hora = parse({{"HORA_TRANSPORTS", "shm"}, {"NCCL_SHM_DISABLE", "1"}, {"NCCL_NET", "Socket"}});
  CHECK(hora.transports == std::vector<std::string>{"shm"});
  CHECK(noted(hora, "NCCL_SHM_DISABLE='1' is overridden by HORA_TRANSPORTS='shm'"));
  CHECK(noted(hora, "NCCL_NET='Socket' is overridden by HORA_TRANSPORTS='shm'"));
}

TEST_CASE("config: NCCL_ALGO", "[config][nccl]") {
  using coll::Kind;
  // A name: forced for every collective Hora's algorithm of that name implements.
  const Config ring = parse({{"NCCL_ALGO", "Ring"}});
  CHECK(forced(ring, Kind::AllReduce) == kRing);
  CHECK(forced(ring, Kind::AllGather) == kRing);
  CHECK(forced(ring, Kind::ReduceScatter) == kRing);
  CHECK(forced(ring, Kind::Broadcast) == -1);  // Hora's ring has no broadcast: the planner chooses
  CHECK(ring.algo == "allgather:ring,reducescatter:ring,allreduce:ring");
  CHECK(noted(ring, "NCCL_ALGO='Ring' read as HORA_ALGO=allgather:ring,reducescatter:ring,allreduce:ring"));
  const Config tree = parse({{"NCCL_ALGO", "tree"}});
  CHECK(forced(tree, Kind::AllReduce) == kTree);
  CHECK(forced(tree, Kind::Broadcast) == kTree);
  CHECK(forced(tree, Kind::Reduce) == kTree);
  CHECK(forced(tree, Kind::AllGather) == -1);
  // Both enabled: nothing to force.
  const Config both = parse({{"NCCL_ALGO", "Ring,Tree"}});
  CHECK(forced(both, Kind::AllReduce) == -1);
  CHECK(forced(both, Kind::AllGather) == kRing);
  // ^ excludes: where Hora has both, the other one remains.
  const Config notTree = parse({{"NCCL_ALGO", "^Tree"}});
  CHECK(forced(notTree, Kind::AllReduce) == kRing);
  CHECK(forced(notTree, Kind::AllGather) == -1);
  CHECK(forced(notTree, Kind::Broadcast) == -1);
  const Config notNvls = parse({{"NCCL_ALGO", "^NVLS,NVLSTree"}});
  CHECK(notNvls.algo == "auto");
  CHECK(notNvls.ncclWarnings.empty());
  // 2.24's per-collective form; the last entry naming a collective wins.
  const Config per = parse({{"NCCL_ALGO", "allreduce:tree;broadcast:ring"}});
  CHECK(forced(per, Kind::AllReduce) == kTree);
  CHECK(forced(per, Kind::Broadcast) == -1);
  CHECK(forced(per, Kind::AllGather) == -1);
  const Config mixed = parse({{"NCCL_ALGO", "ring;AllReduce:tree;reducescatter:^ring"}});
  CHECK(forced(mixed, Kind::AllReduce) == kTree);
  CHECK(forced(mixed, Kind::AllGather) == kRing);
  CHECK(forced(mixed, Kind::ReduceScatter) == -1);
  // An algorithm Hora lacks: a warning that it is ignored; the rest applies.
  const Config nvls = parse({{"NCCL_ALGO", "NVLS,Ring"}});
  CHECK(forced(nvls, Kind::AllReduce) == kRing);
  CHECK(warned(nvls, "NCCL_ALGO='NVLS,Ring': NVLS is not an algorithm Hora has; it is ignored"));
  const Config pat = parse({{"NCCL_ALGO", "allgather:PAT"}});
  CHECK(pat.algo == "auto");
  CHECK(warned(pat, "PAT is not an algorithm Hora has"));
  // What NCCL rejects: the whole value ignored, with a warning; never an error.
  for (const char* bad : {"Ring,Foo", "rd", "allreduce:ring;tree", "gather:ring", "allreduce:", "ring;;bcast:tree"}) {
    INFO(bad);
    Config b;
    REQUIRE_NOTHROW(b = parse({{"NCCL_ALGO", bad}}));
    CHECK(b.algo == "auto");
    for (int f : b.algoForced) CHECK(f == -1);
    CHECK(warned(b, "NCCL_ALGO='" + std::string(bad) + "' is ignored"));
  }
  // HORA_ALGO wins.
  const Config hora = parse({{"HORA_ALGO", "rd"}, {"NCCL_ALGO", "Tree"}});
  CHECK(hora.algo == "rd");
  CHECK(forced(hora, Kind::Broadcast) == -1);
  CHECK(noted(hora, "NCCL_ALGO='Tree' is overridden by HORA_ALGO='rd'"));
}

TEST_CASE("config: NCCL_SOCKET_NTHREADS x NCCL_NSOCKS_PERTHREAD", "[config][nccl]") {
  CHECK(parse({{"NCCL_SOCKET_NTHREADS", "2"}, {"NCCL_NSOCKS_PERTHREAD", "4"}}).nsocksPerPeer == 8);
  CHECK(parse({{"NCCL_SOCKET_NTHREADS", "4"}}).nsocksPerPeer == 4);
  CHECK(parse({{"NCCL_NSOCKS_PERTHREAD", "3"}}).nsocksPerPeer == 3);
  CHECK(parse({{"NCCL_SOCKET_NTHREADS", "0"}}).nsocksPerPeer == 1);
  const Config many = parse({{"NCCL_SOCKET_NTHREADS", "8"}, {"NCCL_NSOCKS_PERTHREAD", "4"}});
  CHECK(many.nsocksPerPeer == 16);
  CHECK(noted(many, "NCCL_SOCKET_NTHREADS='8', NCCL_NSOCKS_PERTHREAD='4' read as HORA_NSOCKS_PERPEER=16 (32 sockets, "
                    "clamped to Hora's 1..16)"));
  const Config bad = parse({{"NCCL_SOCKET_NTHREADS", "-1"}, {"NCCL_NSOCKS_PERTHREAD", "2"}});
  CHECK(bad.nsocksPerPeer == 2);
  CHECK(warned(bad, "NCCL_SOCKET_NTHREADS='-1' is ignored"));
  const Config hora = parse({{"HORA_NSOCKS_PERPEER", "3"}, {"NCCL_SOCKET_NTHREADS", "8"}});
  CHECK(hora.nsocksPerPeer == 3);
  CHECK(noted(hora, "NCCL_SOCKET_NTHREADS='8' is overridden by HORA_NSOCKS_PERPEER='3'"));
}

TEST_CASE("config: NCCL's ib variables", "[config][nccl]") {
  CHECK(parse({{"NCCL_IB_HCA", "mlx5_0:1,mlx5_1"}}).ibHca == "mlx5_0:1,mlx5_1");
  CHECK(parse({{"NCCL_IB_HCA", "^=mlx5_0,,mlx5_3:2"}}).ibHca == "^=mlx5_0,mlx5_3:2");  // NCCL skips empty names
  for (const char* bad : {"mlx5_0:x", "mlx5_0:0", ":1", "^"}) {
    INFO(bad);
    const Config b = parse({{"NCCL_IB_HCA", bad}});
    CHECK(b.ibHca.empty());
    CHECK(warned(b, "NCCL_IB_HCA='" + std::string(bad) + "' is ignored"));
  }
  CHECK(parse({{"HORA_IB_HCA", "rxe0"}, {"NCCL_IB_HCA", "mlx5_0"}}).ibHca == "rxe0");

  CHECK(parse({{"NCCL_IB_GID_INDEX", "3"}}).ibGidIndex == 3);
  CHECK(parse({{"NCCL_IB_GID_INDEX", "-1"}}).ibGidIndex == -1);  // NCCL's default: chosen per port
  for (const char* bad : {"256", "-2", "three"}) {
    INFO(bad);
    const Config b = parse({{"NCCL_IB_GID_INDEX", bad}});
    CHECK(b.ibGidIndex == -1);
    CHECK(warned(b, "NCCL_IB_GID_INDEX='" + std::string(bad) + "' is ignored"));
  }
  CHECK(parse({{"HORA_IB_GID_INDEX", "1"}, {"NCCL_IB_GID_INDEX", "3"}}).ibGidIndex == 1);

  CHECK(parse({{"NCCL_IB_QPS_PER_CONNECTION", "4"}}).ibQpsPerPeer == 4);
  const Config many = parse({{"NCCL_IB_QPS_PER_CONNECTION", "32"}});
  CHECK(many.ibQpsPerPeer == 16);
  CHECK(noted(many, "clamped"));
  for (const char* bad : {"0", "-4", "x"}) {
    INFO(bad);
    const Config b = parse({{"NCCL_IB_QPS_PER_CONNECTION", bad}});
    CHECK(b.ibQpsPerPeer == 1);
    CHECK(warned(b, "NCCL_IB_QPS_PER_CONNECTION='" + std::string(bad) + "' is ignored"));
  }
  CHECK(parse({{"HORA_IB_QPS_PER_PEER", "2"}, {"NCCL_IB_QPS_PER_CONNECTION", "4"}}).ibQpsPerPeer == 2);
}

TEST_CASE("config: NCCL_COMM_BLOCKING, NCCL_P2P_DISABLE and variables Hora ignores", "[config][nccl]") {
  CHECK(parse({}).commBlocking);
  CHECK_FALSE(parse({{"NCCL_COMM_BLOCKING", "0"}}).commBlocking);
  CHECK(parse({{"NCCL_COMM_BLOCKING", "1"}}).commBlocking);
  CHECK_FALSE(parse({{"HORA_COMM_BLOCKING", "0"}}).commBlocking);
  CHECK(parse({{"HORA_COMM_BLOCKING", "1"}, {"NCCL_COMM_BLOCKING", "0"}}).commBlocking);
  const Config bad = parse({{"NCCL_COMM_BLOCKING", "2"}});
  CHECK(bad.commBlocking);
  CHECK(warned(bad, "NCCL_COMM_BLOCKING='2' is ignored"));
  for (const char* b : {"2", "yes", ""}) expectInvalid("HORA_COMM_BLOCKING", b);

  CHECK_FALSE(parse({{"NCCL_P2P_DISABLE", "1"}}).cudaIpc);
  CHECK(parse({{"NCCL_P2P_DISABLE", "0"}}).cudaIpc);
  CHECK(parse({{"HORA_CUDA_IPC", "1"}, {"NCCL_P2P_DISABLE", "1"}}).cudaIpc);

  // NCCL_BUFFSIZE and NCCL_CHUNK_SIZE are not HORA_CHUNK_BYTES: nothing changes.
  const Config chunk = parse({{"NCCL_BUFFSIZE", "1048576"}, {"NCCL_CHUNK_SIZE", "65536"}, {"NCCL_PROTO", "LL"}});
  CHECK(chunk.chunkBytes == 512 * 1024);
  CHECK(chunk.ncclNotes.empty());
  CHECK(chunk.ncclWarnings.empty());
}

TEST_CASE("config: an invalid NCCL value is never an error", "[config][nccl]") {
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"NCCL_DEBUG", "LOUD"},          {"NCCL_DEBUG_SUBSYS", "^^"},      {"NCCL_SOCKET_IFNAME", "^="},
      {"NCCL_IB_HCA", "mlx5_0:999"},   {"NCCL_IB_GID_INDEX", "0x1000"},  {"NCCL_IB_QPS_PER_CONNECTION", "many"},
      {"NCCL_SOCKET_NTHREADS", "65"},  {"NCCL_NSOCKS_PERTHREAD", "1e3"}, {"NCCL_IB_DISABLE", "no"},
      {"NCCL_SHM_DISABLE", "-1"},      {"NCCL_NET", "Gloo"},             {"NCCL_ALGO", "ring:tree"},
      {"NCCL_COMM_BLOCKING", "false"}, {"NCCL_P2P_DISABLE", "7"},
  };
  const Config d = parse({});
  for (const auto& [name, value] : bad) {
    INFO(name << "='" << value << "'");
    Config c;
    REQUIRE_NOTHROW(c = parse({{name, value}}));
    CHECK(warned(c, name + "='" + value + "'"));
    CHECK(warned(c, "ignored"));
    CHECK(c.ncclNotes.empty());
    CHECK(c.debugLevel == d.debugLevel);
    CHECK(c.transports == d.transports);
    CHECK(c.nsocksPerPeer == d.nsocksPerPeer);
    CHECK(c.algo == d.algo);
  }
}
