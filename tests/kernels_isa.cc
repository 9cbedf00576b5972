// Says whether this CPU (and build) runs one instruction set's reduction kernels, so that one
// that test_kernels.cc cannot test here shows up as a skipped test rather than a WARN line in a
// passing one:  kernels_isa avx2|avx512  exits 0 when supported (test_kernels tests it), else 77.
#include <cstdio>
#include <cstring>

#include "kernels/cpu/reduce.h"

int main(int argc, char** argv) {
  using hora::kernels::Isa;
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s avx2|avx512\n", argv[0]);
    return 2;
  }
  Isa isa;
  if (!std::strcmp(argv[1], "avx2")) isa = Isa::Avx2;
  else if (!std::strcmp(argv[1], "avx512")) isa = Isa::Avx512;
  else {
    std::fprintf(stderr, "%s: unknown instruction set '%s'\n", argv[0], argv[1]);
    return 2;
  }
  if (hora::kernels::isaSupported(isa)) {
    std::printf("%s: supported here; the test 'kernels' checks its kernels\n", argv[1]);
    return 0;
  }
  std::printf("SKIP: this CPU or build has no %s: its kernels are not checked on this machine\n", argv[1]);
  return 77;
}
