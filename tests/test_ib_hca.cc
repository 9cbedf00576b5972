// HORA_IB_HCA, the ib transport's device and port filter (transports/ib/device.h): NCCL's
// syntax parsed, every malformed value an error that quotes it, and what each form matches.
#include <string>

#include <catch2/catch.hpp>

#include "base/error.h"
#include "transports/ib/device.h"

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
