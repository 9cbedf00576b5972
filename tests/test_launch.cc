// Tests of the launcher detection (comm/launch.h) with fake environments: each launcher alone,
// launchers nested as users nest them (torchrun inside srun, mpirun inside an sbatch step,
// hora-run inside anything), the disagreements that must fail naming both sources, the
// rendezvous each launcher implies, and the secret's texts.
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <map>
#include <optional>
#include <string>

#include <catch2/catch.hpp>

#include "base/error.h"
#include "comm/launch.h"
#include "fake_env.h"

using namespace hora;

namespace {

using test::Env;
using test::lookup;
using test::contains;

LaunchEnv launch(const Env& env) { return parseLaunchEnv(lookup(env)); }

// The error text of parsing `env`, which must fail with InvalidArgument.
std::string failure(const Env& env) {
  try {
    launch(env);
  } catch (const Error& e) {
    CHECK(e.code() == Errc::InvalidArgument);
    return e.what();
  }
  FAIL("no error");
  return "";
}

const Env kSlurmStep = {{"SLURM_JOB_ID", "4242"},         {"SLURM_STEP_ID", "3"},
                        {"SLURM_PROCID", "2"},            {"SLURM_STEP_NUM_TASKS", "4"},
                        {"SLURM_NTASKS", "16"},           {"SLURM_STEP_NODELIST", "gpu[007-008],cpu1"},
                        {"SLURM_JOB_NODELIST", "gpu[001-008],cpu1"}};

Env with(Env base, const Env& more) {
  for (const auto& kv : more) base[kv.first] = kv.second;
  return base;
}

}  // namespace

TEST_CASE("launch: HORA_* variables", "[launch]") {
  LaunchEnv l = launch({{"HORA_RANK", "3"}, {"HORA_SIZE", "8"}, {"HORA_ID", " abcdef "}, {"HORA_SECRET", "00ff"}});
  CHECK(l.rank == 3);
  CHECK(l.size == 8);
  CHECK(l.idHex == "abcdef");
  CHECK(l.root.empty());
  CHECK(l.secretHex == "00ff");
  CHECK(l.source == "rank 3 of 8 from HORA_RANK/HORA_SIZE (hora-run) (HORA_RANK, HORA_SIZE); rendezvous from HORA_ID");

  LaunchEnv none = launch({});
  CHECK(none.rank == -1);
  CHECK(none.size == -1);
  CHECK(none.launcher.empty());
  CHECK(none.idHex.empty());
  CHECK(none.root.empty());
  CHECK(contains(none.rendezvousHint, "HORA_ID"));

  LaunchEnv root = launch({{"HORA_RANK", "0"}, {"HORA_SIZE", "2"}, {"HORA_ROOT", "10.0.0.1:29500"}});
  CHECK(root.root == "10.0.0.1:29500");
  CHECK(root.rootFrom == "HORA_ROOT");
  CHECK(contains(root.source, "rendezvous at 10.0.0.1:29500 from HORA_ROOT"));
}

TEST_CASE("launch: each launcher alone", "[launch]") {
  SECTION("srun: a step's rank and size, the step's first node, a port from job and step") {
    LaunchEnv l = launch(kSlurmStep);
    CHECK(l.rank == 2);
    CHECK(l.size == 4);  // the step's, not the allocation's 16
    CHECK(contains(l.launcher, "Slurm"));
    CHECK(l.root == "gpu007:" + std::to_string(slurmStepPort(4242, 3)));
    CHECK(contains(l.rootFrom, "SLURM_STEP_NODELIST"));
    CHECK(contains(l.source, "SLURM_PROCID"));
  }
  SECTION("srun without SLURM_STEP_NUM_TASKS falls back to SLURM_NTASKS") {
    Env e = kSlurmStep;
    e.erase("SLURM_STEP_NUM_TASKS");
    LaunchEnv l = launch(e);
    CHECK(l.size == 16);
    CHECK(contains(l.launcher, "SLURM_NTASKS"));
  }
  SECTION("a Slurm batch script is one process, not rank 0 of a job") {
    LaunchEnv l = launch({{"SLURM_JOB_ID", "77"}, {"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "4"}});
    CHECK(l.size == -1);
    CHECK(contains(l.rendezvousHint, "SLURM_JOB_ID=77 without SLURM_STEP_ID"));
    CHECK(contains(l.rendezvousHint, "srun"));
  }
  SECTION("Open MPI: rank and size, and a hint for the rendezvous") {
    LaunchEnv l = launch({{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "2"}});
    CHECK(l.rank == 1);
    CHECK(l.size == 2);
    CHECK(contains(l.launcher, "Open MPI"));
    CHECK(l.root.empty());
    CHECK(contains(l.rendezvousHint, "mpirun -x HORA_ROOT"));
  }
  SECTION("MPICH's PMI") {
    LaunchEnv l = launch({{"PMI_RANK", "0"}, {"PMI_SIZE", "3"}, {"HORA_ROOT", "h:1"}});
    CHECK(l.rank == 0);
    CHECK(l.size == 3);
    CHECK(contains(l.launcher, "PMI"));
  }
  SECTION("torchrun: the rendezvous beside MASTER_PORT, which torchrun's agent holds") {
    LaunchEnv l = launch({{"RANK", "1"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "1"}, {"MASTER_ADDR", "node7"},
                          {"MASTER_PORT", "29500"}, {"TORCHELASTIC_RUN_ID", "none"}});
    CHECK(l.rank == 1);
    CHECK(l.size == 4);
    CHECK(contains(l.launcher, "torchrun"));
    CHECK(l.root == "node7:39500");
    CHECK(l.rootFrom == "MASTER_ADDR and MASTER_PORT");
    CHECK(contains(l.source, "MASTER_PORT 29500 + 10000: torchrun's agent holds MASTER_PORT"));
  }
  SECTION("torch's env:// variables without torchrun (Kubernetes-style)") {
    LaunchEnv l = launch({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "fd00::1"}, {"MASTER_PORT", "60000"}});
    CHECK(l.size == 2);
    CHECK(l.root == "[fd00::1]:50000");
    CHECK(contains(l.source, "torch's store holds MASTER_PORT"));
  }
}

TEST_CASE("launch: nested launchers take the innermost as a whole", "[launch]") {
  SECTION("srun ... torchrun: each worker sees srun's 0 of 1 and torchrun's own rank") {
    Env e = {{"SLURM_JOB_ID", "9"},  {"SLURM_STEP_ID", "0"},       {"SLURM_PROCID", "0"},
             {"SLURM_NTASKS", "1"},  {"SLURM_STEP_NUM_TASKS", "1"}, {"SLURM_STEP_NODELIST", "n1"},
             {"RANK", "1"},          {"WORLD_SIZE", "2"},           {"TORCHELASTIC_RUN_ID", "x"},
             {"MASTER_ADDR", "n1"},  {"MASTER_PORT", "29520"}};
    LaunchEnv l = launch(e);
    CHECK(l.rank == 1);
    CHECK(l.size == 2);
    CHECK(contains(l.launcher, "torchrun"));
    CHECK(l.root == "n1:39520");  // MASTER_ADDR, not the step's node list
    CHECK(contains(l.source, "outer launchers, ignored: Slurm (srun) rank 0 of 1"));
  }
  SECTION("mpirun inside a Slurm job: Open MPI's ranks, not the daemons' step") {
    LaunchEnv l = launch(with(kSlurmStep, {{"OMPI_COMM_WORLD_RANK", "5"}, {"OMPI_COMM_WORLD_SIZE", "8"}}));
    CHECK(l.rank == 5);
    CHECK(l.size == 8);
    CHECK(contains(l.launcher, "Open MPI"));
    CHECK(l.root.empty());  // never the step's node list for another launcher's ranks
  }
  SECTION("srun --mpi=pmi2: Slurm and PMI agree") {
    LaunchEnv l = launch(with(kSlurmStep, {{"PMI_RANK", "2"}, {"PMI_SIZE", "4"}}));
    CHECK(l.rank == 2);
    CHECK(l.size == 4);
  }
  SECTION("hora-run inside anything wins, even with one rank") {
    LaunchEnv l = launch(with(kSlurmStep, {{"HORA_RANK", "0"}, {"HORA_SIZE", "1"}, {"RANK", "3"},
                                           {"WORLD_SIZE", "10"}, {"TORCHELASTIC_RUN_ID", "x"}, {"HORA_ID", "ab"}}));
    CHECK(l.rank == 0);
    CHECK(l.size == 1);
    CHECK(l.idHex == "ab");
  }
  SECTION("a smaller inner job is allowed, with a warning") {
    LaunchEnv l = launch(with(kSlurmStep, {{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"TORCHELASTIC_RUN_ID", "x"}}));
    CHECK(l.size == 2);
    REQUIRE(l.warnings.size() == 1);
    CHECK(contains(l.warnings[0], "one of several separate jobs"));
  }
  SECTION("RANK alone, without torchrun, is nobody's") {
    LaunchEnv l = launch(with(kSlurmStep, {{"RANK", "7"}}));
    CHECK(l.rank == 2);
    CHECK(launch({{"RANK", "7"}}).size == -1);
  }
}

TEST_CASE("launch: what cannot be resolved fails naming both sources", "[launch]") {
  SECTION("two launchers of one level disagree") {
    std::string t = failure({{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "4"},
                             {"PMI_RANK", "2"}, {"PMI_SIZE", "4"}});
    CHECK(contains(t, "OMPI_COMM_WORLD_RANK=1, OMPI_COMM_WORLD_SIZE=4"));
    CHECK(contains(t, "PMI_RANK=2, PMI_SIZE=4"));
  }
  SECTION("an inner launcher of one rank inside an outer one of several") {
    std::string t = failure(with(kSlurmStep, {{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"TORCHELASTIC_RUN_ID", "x"}}));
    CHECK(contains(t, "torchrun says rank 0 of 1 (RANK=0, WORLD_SIZE=1)"));
    CHECK(contains(t, "SLURM_PROCID=2, SLURM_STEP_NUM_TASKS=4"));
    CHECK(contains(t, "separate one-rank job"));
  }
  SECTION("never mixed variable by variable: half a launcher is an error") {
    CHECK(contains(failure(with(kSlurmStep, {{"HORA_SIZE", "3"}})), "HORA_SIZE=3 is set but HORA_RANK is not"));
    CHECK(contains(failure({{"OMPI_COMM_WORLD_RANK", "0"}}), "OMPI_COMM_WORLD_SIZE is not"));
    CHECK(contains(failure({{"RANK", "0"}, {"TORCHELASTIC_RUN_ID", "x"}}), "WORLD_SIZE is not"));
  }
  SECTION("a rank out of its launcher's range") {
    CHECK(contains(failure({{"PMI_RANK", "4"}, {"PMI_SIZE", "4"}}), "PMI_RANK=4 is out of range for PMI_SIZE=4"));
  }
  SECTION("MASTER_ADDR without MASTER_PORT, or a bad one") {
    CHECK(contains(failure({{"MASTER_ADDR", "node7"}}), "MASTER_PORT is not"));
    CHECK(contains(failure({{"MASTER_ADDR", "node7"}, {"MASTER_PORT", "70000"}}), "MASTER_PORT='70000'"));
  }
  SECTION("malformed values name the variable and the value") {
    const std::pair<const char*, const char*> pairs[] = {
        {"HORA_RANK", "HORA_SIZE"}, {"SLURM_PROCID", "SLURM_STEP_NUM_TASKS"},
        {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"}, {"RANK", "WORLD_SIZE"}};
    const char* badRanks[] = {"-1", "abc", "1x", "2.0", "1048576"};
    const char* badSizes[] = {"0", "-2", "many", "1048577"};
    for (const auto& p : pairs) {
      Env base = {{"SLURM_STEP_ID", "0"}, {"TORCHELASTIC_RUN_ID", "x"}};
      for (const char* v : badRanks) {
        INFO(p.first << "=" << v);
        std::string t = failure(with(base, {{p.first, v}, {p.second, "4"}}));
        CHECK(contains(t, std::string(p.first) + "='" + v + "'"));
      }
      for (const char* v : badSizes) {
        INFO(p.second << "=" << v);
        std::string t = failure(with(base, {{p.first, "0"}, {p.second, v}}));
        CHECK(contains(t, std::string(p.second) + "='" + v + "'"));
      }
    }
    LaunchEnv l = launch({{"HORA_RANK", "1048575"}, {"HORA_SIZE", "1048576"}});
    CHECK(l.rank == 1048575);
    CHECK(l.size == 1048576);
  }
}

TEST_CASE("launch: Slurm host lists and derived ports", "[launch]") {
  CHECK(firstSlurmHost("node[07-09,12],gpu1") == "node07");
  CHECK(firstSlurmHost("tux1") == "tux1");
  CHECK(firstSlurmHost("tux1,tux2") == "tux1");
  CHECK(firstSlurmHost("rack1-[2-4]") == "rack1-2");
  CHECK(firstSlurmHost("a[1-2]b[3-4]") == "a1b3");
  CHECK(firstSlurmHost("n[009]") == "n009");
  CHECK_THROWS_AS(firstSlurmHost("n[1-2"), Error);
  CHECK_THROWS_AS(firstSlurmHost(""), Error);
  CHECK(portBesideMasterPort(29500) == 39500);
  CHECK(portBesideMasterPort(65535) == 55535);
  // Steps of one job, and consecutive jobs, get different ports, all below the ephemeral range.
  CHECK(slurmStepPort(100, 0) != slurmStepPort(100, 1));
  CHECK(slurmStepPort(100, 0) != slurmStepPort(101, 0));
  for (unsigned long long j = 0; j < 5000; j += 7) {
    CHECK(slurmStepPort(j, 0) >= 12000);
    CHECK(slurmStepPort(j, 0) < 32000);
  }
}

TEST_CASE("launch: the secret's texts say what to do", "[launch]") {
  const std::string good(64, 'a');
  LaunchEnv l = launch({{"HORA_ROOT", "h:1"}, {"HORA_SECRET", good}});
  Secret s = parseSecret(l);
  CHECK(s.bytes[0] == 0xaa);
  CHECK(s.bytes[31] == 0xaa);

  auto secretError = [](const LaunchEnv& l) {
    try {
      parseSecret(l);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  CHECK(contains(secretError(launch({{"HORA_ROOT", "h:1"}, {"HORA_SECRET", good + "b"}})),
                 "HORA_SECRET has 65 hex digits; it needs 64"));
  std::string g = good;
  g[4] = 'g';
  CHECK(contains(secretError(launch({{"HORA_ROOT", "h:1"}, {"HORA_SECRET", g}})),
                 "HORA_SECRET holds 'g' at position 5, not a hex digit"));
  std::string t = secretError(launch({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "m"}, {"MASTER_PORT", "29500"}}));
  CHECK(contains(t, "m:39500 (from MASTER_ADDR and MASTER_PORT) needs a secret"));
  CHECK(!contains(t, "HORA_ROOT"));

  SECTION("HORA_SECRET_FILE") {
    char path[] = "/tmp/hora-secret-XXXXXX";
    int fd = mkstemp(path);
    REQUIRE(fd >= 0);
    std::string body = "  " + std::string(64, 'B') + "\n";
    REQUIRE(write(fd, body.data(), body.size()) == static_cast<ssize_t>(body.size()));
    close(fd);
    chmod(path, 0600);
    LaunchEnv f = launch({{"HORA_ROOT", "h:1"}, {"HORA_SECRET_FILE", path}});
    CHECK(f.secretHex == std::string(64, 'B'));
    CHECK(f.warnings.empty());
    CHECK(parseSecret(f).bytes[3] == 0xbb);
    chmod(path, 0644);
    f = launch({{"HORA_ROOT", "h:1"}, {"HORA_SECRET_FILE", path}});
    REQUIRE(f.warnings.size() == 1);
    CHECK(contains(f.warnings[0], "readable by other users"));
    CHECK(contains(failure({{"HORA_SECRET_FILE", path}, {"HORA_SECRET", good}}), "both set"));
    unlink(path);
    CHECK(contains(failure({{"HORA_SECRET_FILE", path}}), "cannot be read"));
    CHECK(contains(failure({{"HORA_SECRET_FILE", "/dev/zero"}}), "larger than 4096 bytes"));
  }
}
