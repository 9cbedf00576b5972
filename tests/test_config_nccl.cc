// Tests of NCCL's environment variables as the configuration parser reads them (comm/config.h,
// comm/config_nccl.cc): which Hora setting each becomes, what is noted or warned, and that an
// invalid NCCL value is never an error.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "base/log.h"
#include "unit_config.h"

using namespace hora;
using test::contains;
using test::Env;
using test::expectInvalid;
using test::optionalNames;
using test::parse;

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
