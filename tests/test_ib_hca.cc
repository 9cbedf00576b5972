// HORA_IB_HCA, the ib transport's device and port filter (transports/ib/device.h): NCCL's
// syntax parsed, every malformed value an error that quotes it, and what each form matches.
#include <string>

#include <catch2/catch.hpp>

#include "base/error.h"
#include "transports/ib/device.h"
#include "transports/registry.h"

using namespace hora;
using namespace hora::ib;

namespace {
bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }
}  // namespace

TEST_CASE("HORA_IB_HCA: what each form matches", "[ib]") {
  const HcaFilter all = parseHcaFilter("");
  CHECK(all.matches("mlx5_0", 1));
  CHECK(all.matches("rxe0", 2));

  const HcaFilter prefix = parseHcaFilter("mlx5");
  CHECK(prefix.matches("mlx5_0", 1));
  CHECK(prefix.matches("mlx5_13", 2));
  CHECK_FALSE(prefix.matches("rxe0", 1));

  const HcaFilter ports = parseHcaFilter(" mlx5_0:1 , mlx5_1 ");
  CHECK(ports.matches("mlx5_0", 1));
  CHECK_FALSE(ports.matches("mlx5_0", 2));
  CHECK(ports.matches("mlx5_1", 2));
  CHECK(ports.matches("mlx5_10", 1));  // a prefix
  CHECK_FALSE(ports.matches("mlx4_0", 1));

  const HcaFilter exact = parseHcaFilter("=mlx5_1");
  CHECK(exact.matches("mlx5_1", 1));
  CHECK_FALSE(exact.matches("mlx5_10", 1));

  const HcaFilter exclude = parseHcaFilter("^mlx5_0:1");
  CHECK_FALSE(exclude.matches("mlx5_0", 1));
  CHECK(exclude.matches("mlx5_0", 2));
  CHECK(exclude.matches("rxe0", 1));

  const HcaFilter exactExclude = parseHcaFilter("^=rxe0");
  CHECK_FALSE(exactExclude.matches("rxe0", 1));
  CHECK(exactExclude.matches("rxe01", 1));
}

TEST_CASE("HORA_IB_HCA: malformed values are errors that quote them", "[ib]") {
  for (const char* bad : {"^", "=", "^=", "mlx5_0,", ",mlx5_0", "mlx5_0,,mlx5_1", ":1", "mlx5_0:", "mlx5_0:x",
                          "mlx5_0:0", "mlx5_0:256", "mlx5_0:1:2"}) {
    INFO(bad);
    try {
      parseHcaFilter(bad);
      FAIL("no error");
    } catch (const Error& e) {
      CHECK(e.code() == Errc::InvalidArgument);
      CHECK(contains(e.what(), std::string("HORA_IB_HCA='") + bad + "'"));
    }
  }
}

TEST_CASE("an IB HCA filter that matches no port: an error from HORA_IB_HCA, ib off from NCCL_IB_HCA", "[ib]") {
  const hora::transport::Registration* ib = nullptr;
  for (const hora::transport::Registration& r : hora::transport::registry())
    if (std::string(r.name) == "ib") ib = &r;
  REQUIRE(ib != nullptr);
  hora::transport::Settings s;
  s.ibHca = "=no_such_hca_anywhere";
  // HORA_IB_HCA: the filter is the user's demand.
  s.ibHcaLenient = false;
  CHECK_THROWS_WITH(ib->make(s), Catch::Contains("HORA_IB_HCA='=no_such_hca_anywhere' leaves no usable RDMA port"));
  // NCCL_IB_HCA: as NCCL, the network goes without ib.
  s.ibHcaLenient = true;
  std::unique_ptr<hora::transport::Transport> t;
  REQUIRE_NOTHROW(t = ib->make(s));
  CHECK(t->offReason().find("NCCL_IB_HCA='=no_such_hca_anywhere'") != std::string::npos);
  CHECK(t->field().empty());
}
