// Tests of the configuration parser (comm/config.h) with a fake environment: defaults, every
// variable's valid forms, every invalid value rejected with InvalidArgument naming the
// variable and the value, and the detection of misspelt HORA_* names. NCCL's variables, read as
// Hora's, are test_config_nccl.cc's.
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "base/error.h"
#include "comm/config.h"
#include "unit_config.h"

using namespace hora;

using test::Env;
using test::contains;
using test::expectInvalid;
using test::optionalNames;
using test::parse;

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
