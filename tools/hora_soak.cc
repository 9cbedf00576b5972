// hora-soak: a burn-in of the library, for an operator's new cluster. It runs random
// collectives (AllReduce, Broadcast, Reduce, AllGather, ReduceScatter, AllToAll, Send/Recv in
// a shifted ring and in single pairs, Barrier; in place and out of place) over random data
// types, ops (sum, prod, max, min, avg, premul-sum), counts (0 to -e bytes, log-uniform) and
// roots, for -t seconds or -c calls, and checks every result on the host. One draw in eight
// is a group of calls (horaGroupStart/End), and each rank makes a quarter of its calls (or
// groups) on a host stream (then synchronizes), its own choice.
//
// Replay. Every rank draws the same sequence of calls from one seed (-s, or drawn by rank 0
// and broadcast), printed at the start and the end. The input of rank q to call k is a pure
// function of (seed, k, q, element index), so every rank regenerates any other rank's input
// and computes the expected result without any communication beyond the call under test.
//
// Exactness. The reference follows docs/concepts.md's Semantics bit for bit:
//  - integers wrap (sum, prod, premul-sum), max/min compare by signedness, avg is the
//    truncated quotient of the wrapped sum: any order of combination gives the same bits,
//    so integer inputs are random bits;
//  - floating sum, avg and premul-sum: the order in which an algorithm adds is not fixed
//    across algorithms, and the narrow types round at every step an algorithm stores a
//    partial sum. So the inputs are small integers (times premul scalars of +-1/2, 1, 2) whose
//    absolute values, over all ranks, add up to no more than the type's exact-integer range
//    (2^(mantissa bits + 1) units): every partial sum in any order is exact, and so is the
//    result. avg then divides once, in float (double for float64), and rounds once to the
//    type, as the kernels do (kernels/cpu/reduce.h);
//  - floating prod: factors +-1 and +-2 (and signed zeros), at most as many 2s per element
//    as keep the product within range: exact in any order;
//  - floating max/min: random bit patterns, NaN now and then (any NaN is accepted where NaN
//    is due, as its payload depends on order), never -0 (max(+0, -0) depends on order);
//  - data movement (Broadcast, AllGather, AllToAll, Send/Recv): random bits, NaNs included,
//    compared bit for bit.
// Beyond the result: the bytes before and after each receive buffer must be untouched, the
// send buffer of an out-of-place call unchanged, and a non-root's receive buffer of a Reduce
// unwritten.
#include <getopt.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <new>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "../perf/common.h"  // hperf: type names and sizes, half/bfloat16 conversion, findLauncher
#include "hora.h"
#include "hora_soak.h"

namespace {

const char* kProgram = "hora-soak";

// ---- options -----------------------------------------------------------------------

struct Options {
  double seconds = 0;   // -t; 0: none
  uint64_t calls = 0;   // -c; 0: none (neither: -t 60)
  bool seedGiven = false;
  uint64_t seed = 0;
  size_t maxBytes = size_t{1} << 20;  // -e: the largest buffer of one rank in one call
  int threads = 0;                    // -N
  bool verbose = false;               // -v
  int64_t corruptCall = -1;           // --corrupt-call K[:R] (tests only)
  int corruptRank = 0;
  bool pairsInGroups = true;          // --no-pairs-in-groups turns it off
};

void usage(FILE* out) {
  std::fprintf(out,
      "usage: %s [options]\n"
      "  -t, --time <seconds>    run for this long (default 60 when -c is not given)\n"
      "  -c, --calls <n>         run this many calls (with -t: whichever comes first)\n"
      "  -s, --seed <n>          the seed of the sequence of calls and of all data (default: drawn by\n"
      "                          rank 0 and printed; the same seed, -e and number of ranks replay a run)\n"
      "                          (rank 0's -t, -c, -s and -e hold for every rank)\n"
      "  -e, --maxbytes <size>   the largest buffer of one rank in one call, K/M/G suffixes (default 1M)\n"
      "  -N, --nranks <n>        run n ranks as threads of this process (horaCommInitAll); without it\n"
      "                          the ranks come from the launcher (hora-run, srun, mpirun or torchrun\n"
      "                          with HORA_ROOT and HORA_SECRET), else 1 rank\n"
      "  -v, --verbose           rank 0 prints every call before it is made\n"
      "      --no-pairs-in-groups  keep a send/recv between two ranks out of groups of calls\n"
      "      --chaos             start ranks of its own and kill, stop and resume them (--chaos --help)\n"
      "  -h, --help              show this text\n"
      "Exit status: 0 when every result was right and every call succeeded, 1 otherwise, 2 on bad usage.\n",
      kProgram);
}

[[noreturn]] void badUsage(const std::string& what) {
  std::fprintf(stderr, "%s: %s\n", kProgram, what.c_str());
  usage(stderr);
  std::exit(2);
}

uint64_t numberOption(const char* text, uint64_t lo, uint64_t hi, const char* name) {
  uint64_t v = 0;
  if (!hora_soak::parseUnsigned(text, lo, hi, &v)) badUsage(std::string("bad value for ") + name + " '" + text + "'");
  return v;
}


Options parseOptions(int argc, char** argv) {
  Options o;
  constexpr int kCorrupt = 256, kPairs = 257;
  static const option longOpts[] = {
      {"time", required_argument, nullptr, 't'},     {"calls", required_argument, nullptr, 'c'},
      {"seed", required_argument, nullptr, 's'},     {"maxbytes", required_argument, nullptr, 'e'},
      {"nranks", required_argument, nullptr, 'N'},   {"verbose", no_argument, nullptr, 'v'},
      {"help", no_argument, nullptr, 'h'},           {"corrupt-call", required_argument, nullptr, kCorrupt},
      {"no-pairs-in-groups", no_argument, nullptr, kPairs},
      {nullptr, 0, nullptr, 0}};
  opterr = 0;
  int c;
  while ((c = getopt_long(argc, argv, ":t:c:s:e:N:vh", longOpts, nullptr)) != -1) {
    switch (c) {
      case 't': {
        char* end = nullptr;
        o.seconds = std::strtod(optarg, &end);
        if (end == optarg || *end || !(o.seconds > 0) || o.seconds > 1e9) badUsage(std::string("bad value for -t '") + optarg + "'");
        break;
      }
      case 'c': o.calls = numberOption(optarg, 1, UINT64_MAX, "-c"); break;
      case 's': o.seed = numberOption(optarg, 0, UINT64_MAX, "-s"); o.seedGiven = true; break;
      case 'e':
        if (!hperf::parseSize(optarg, &o.maxBytes)) badUsage(std::string("bad size for -e '") + optarg + "'");
        break;
      case 'N': o.threads = static_cast<int>(numberOption(optarg, 1, 1024, "-N")); break;
      case 'v': o.verbose = true; break;
      case kPairs: o.pairsInGroups = false; break;
      case 'h': usage(stdout); std::exit(0);
      case kCorrupt: {  // K or K:RANK: flip a byte of the first non-empty result from call K on
                        // that rank (default 0), after the call, so a test can prove the check bites
        std::string v = optarg;
        const size_t colon = v.find(':');
        o.corruptCall = static_cast<int64_t>(numberOption(v.substr(0, colon).c_str(), 0, INT64_MAX, "--corrupt-call"));
        if (colon != std::string::npos)
          o.corruptRank = static_cast<int>(numberOption(v.substr(colon + 1).c_str(), 0, 1 << 20, "--corrupt-call"));
        break;
      }
      case ':':
      default: {
        std::string name = optopt > 0 && optopt < 128 ? std::string("-") + static_cast<char>(optopt) : argv[optind - 1];
        badUsage((c == ':' ? "option needs a value: " : "unknown option ") + name);
      }
    }
  }
  if (optind < argc) badUsage(std::string("unexpected argument '") + argv[optind] + "'");
  if (o.seconds == 0 && o.calls == 0) o.seconds = 60;
  return o;
}

// ---- random numbers ----------------------------------------------------------------

// splitmix64's finaliser: a bijection of 64 bits that mixes every input bit into every output bit.
uint64_t mix(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
uint64_t hash3(uint64_t a, uint64_t b, uint64_t c) {
  return mix(a ^ mix(b + 0x9e3779b97f4a7c15ull * (c + 1)));
}

// The sequence of calls: the same on every rank for one seed (no std:: distributions, whose
// results differ between standard libraries).
struct Rng {
  uint64_t state;
  explicit Rng(uint64_t seed) : state(mix(seed ^ 0x5eed5eed5eed5eedull)) {}
  uint64_t next() { return mix(state += 0x9e3779b97f4a7c15ull); }
  uint64_t below(uint64_t n) { return n ? next() % n : 0; }
  double unit() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
};

// ---- data types --------------------------------------------------------------------

const horaDataType_t kTypes[] = {horaInt8,    horaUint8,   horaInt32,    horaUint32,
                                 horaInt64,   horaUint64,  horaFloat16,  horaFloat32,
                                 horaFloat64, horaBfloat16, horaFloat8e4m3, horaFloat8e5m2};

bool isFloating(horaDataType_t t) {
  return t == horaFloat16 || t == horaFloat32 || t == horaFloat64 || t == horaBfloat16 ||
         t == horaFloat8e4m3 || t == horaFloat8e5m2;
}
bool isSignedInt(horaDataType_t t) { return t == horaInt8 || t == horaInt32 || t == horaInt64; }

uint64_t typeMask(size_t size) { return size >= 8 ? ~uint64_t{0} : (uint64_t{1} << (8 * size)) - 1; }

// Stored significand bits, counting the hidden one: integers up to 2^digits are exact.
int digits(horaDataType_t t) {
  switch (t) {
    case horaFloat16: return 11;
    case horaBfloat16: return 8;
    case horaFloat8e4m3: return 4;
    case horaFloat8e5m2: return 3;
    case horaFloat32: return 24;
    default: return 53;
  }
}
// The largest power of two below the type's largest finite value: the bound on products.
int maxExponent(horaDataType_t t) {
  switch (t) {
    case horaFloat16: return 15;
    case horaBfloat16: case horaFloat32: return 127;
    case horaFloat8e4m3: return 8;
    case horaFloat8e5m2: return 15;
    default: return 1023;
  }
}

// float8: decoded by definition (not the library's code), rounded to nearest even by search.
// e4m3 (the "fn" variant): bias 7, no infinity, S.1111.111 is NaN, overflow saturates to 448.
// e5m2: IEEE-like, bias 15, overflow to infinity.
struct Fp8 {
  bool ieee;
  float value[256];
  int lastFinite;  // the largest positive code that is not NaN (inf for e5m2)

  explicit Fp8(bool e5m2) : ieee(e5m2) {
    const int mbits = e5m2 ? 2 : 3, ebits = e5m2 ? 5 : 4, bias = e5m2 ? 15 : 7;
    for (int code = 0; code < 256; ++code) {
      const int exp = (code >> mbits) & ((1 << ebits) - 1), man = code & ((1 << mbits) - 1);
      float v;
      if (exp == 0) v = std::ldexp(static_cast<float>(man), 1 - bias - mbits);
      else if (e5m2 && exp == 31) v = man ? NAN : INFINITY;
      else if (!e5m2 && exp == 15 && man == 7) v = NAN;
      else v = std::ldexp(1.0f + static_cast<float>(man) / static_cast<float>(1 << mbits), exp - bias);
      value[code] = code & 0x80 ? -v : v;
    }
    lastFinite = e5m2 ? 0x7c : 0x7e;
  }
  uint8_t round(float f) const {
    if (std::isnan(f)) return 0x7f;
    const uint8_t sign = std::signbit(f) ? 0x80 : 0;
    const float a = std::fabs(f);
    // Positive codes 0..lastFinite increase with their value; inf counts as the next power of
    // two (65536 for e5m2), so that IEEE's overflow rule is the nearest-even rule.
    auto mag = [&](int code) { return std::isinf(value[code]) ? 65536.0f : value[code]; };
    int lo = 0;
    while (lo < lastFinite && mag(lo + 1) <= a) ++lo;
    if (lo == lastFinite) return static_cast<uint8_t>(sign | lo);  // saturated (e4m3) or inf
    const float dlo = a - mag(lo), dhi = mag(lo + 1) - a;
    const int code = dlo < dhi ? lo : dhi < dlo ? lo + 1 : (lo & 1 ? lo + 1 : lo);
    return static_cast<uint8_t>(sign | code);
  }
};
const Fp8 kE4m3(false), kE5m2(true);

// A floating value of type t, from its bits (exact).
double decode(horaDataType_t t, uint64_t bits) {
  switch (t) {
    case horaFloat16: return hperf::halfToFloat(static_cast<uint16_t>(bits));
    case horaBfloat16: return hperf::bf16ToFloat(static_cast<uint16_t>(bits));
    case horaFloat8e4m3: return kE4m3.value[bits & 0xff];
    case horaFloat8e5m2: return kE5m2.value[bits & 0xff];
    case horaFloat32: {
      float f;
      const uint32_t u = static_cast<uint32_t>(bits);
      std::memcpy(&f, &u, 4);
      return f;
    }
    default: {
      double d;
      std::memcpy(&d, &bits, 8);
      return d;
    }
  }
}

// The bits of v in type t: exact for float64; otherwise v is first made a float (exact for
// every value this tool encodes), then rounded to nearest even into the narrow types.
uint64_t encode(horaDataType_t t, double v) {
  if (t == horaFloat64) {
    uint64_t b;
    std::memcpy(&b, &v, 8);
    return b;
  }
  const float f = static_cast<float>(v);
  switch (t) {
    case horaFloat16: return hperf::floatToHalf(f);
    case horaBfloat16: return hperf::floatToBf16(f);
    case horaFloat8e4m3: return kE4m3.round(f);
    case horaFloat8e5m2: return kE5m2.round(f);
    default: {
      uint32_t u;
      std::memcpy(&u, &f, 4);
      return u;
    }
  }
}

bool isNaN(horaDataType_t t, uint64_t bits) { return isFloating(t) && std::isnan(decode(t, bits)); }

uint64_t load(const void* p, size_t i, size_t size) {
  uint64_t v = 0;
  std::memcpy(&v, static_cast<const char*>(p) + i * size, size);  // little-endian
  return v;
}
void store(void* p, size_t i, size_t size, uint64_t v) { std::memcpy(static_cast<char*>(p) + i * size, &v, size); }

// "5 (0x05)", "-2.5 (0xc100)"
std::string showValue(horaDataType_t t, uint64_t bits) {
  const size_t size = hperf::typeSize(t);
  char buf[96];
  if (isFloating(t)) {
    std::snprintf(buf, sizeof buf, "%.9g (0x%0*" PRIx64 ")", decode(t, bits), static_cast<int>(2 * size), bits);
  } else if (isSignedInt(t)) {
    const int shift = static_cast<int>(64 - 8 * size);
    const int64_t v = static_cast<int64_t>(bits << shift) >> shift;
    std::snprintf(buf, sizeof buf, "%" PRId64 " (0x%0*" PRIx64 ")", v, static_cast<int>(2 * size), bits);
  } else {
    std::snprintf(buf, sizeof buf, "%" PRIu64 " (0x%0*" PRIx64 ")", bits, static_cast<int>(2 * size), bits);
  }
  return buf;
}

// ---- calls -------------------------------------------------------------------------

enum Coll { kAllReduce, kBroadcast, kReduce, kAllGather, kReduceScatter, kAllToAll, kSendRecv, kPair, kBarrier, kNumColls };
const char* const kCollNames[] = {"allreduce", "broadcast",  "reduce",   "allgather", "reducescatter",
                                  "alltoall",  "sendrecv",   "sendrecv-pair", "barrier"};
enum Op { kSum, kProd, kMax, kMin, kAvg, kPreMulSum, kNumOps, kNoOp = -1 };
const char* const kOpNames[] = {"sum", "prod", "max", "min", "avg", "premulsum"};

bool hasOp(Coll c) { return c == kAllReduce || c == kReduce || c == kReduceScatter; }
bool hasRoot(Coll c) { return c == kBroadcast || c == kReduce; }

struct Call {
  uint64_t index = 0;
  Coll coll = kBarrier;
  horaDataType_t type = horaUint8;
  int op = kNoOp;
  size_t count = 0;  // the count passed (per block for allgather, reducescatter, alltoall)
  int root = 0;
  bool inPlace = false;
  int shift = 0;         // sendrecv: each rank sends to rank + shift, receives from rank - shift
  int from = 0, to = 0;  // sendrecv-pair: one send, one receive
  uint64_t salt = 0;     // the seed of this call's data
  uint64_t groupFirst = 0;  // the first call of its group (horaGroupStart/End) ...
  uint64_t groupSize = 1;   // ... of this many calls; 1: no group
  uint64_t groupSalt = 0;   // the first call's salt

  // Whether `rank` makes this call on a host stream (horaStreamCreate) and waits with
  // horaStreamSynchronize, rather than synchronously: a rank's own choice, a quarter of calls
  // (of groups: all calls of a group name one stream).
  bool onStream(int rank) const { return hash3(groupSalt, static_cast<uint64_t>(rank), 11) % 4 == 0; }

  // As `rank` made it: "allreduce float sum count 1000 in place", "broadcast int8 count 7 root
  // 2 out of place on a host stream"
  std::string describe(int rank) const {
    std::string s = kCollNames[coll];
    const char* stream = onStream(rank) ? " on a host stream" : "";
    if (coll == kBarrier) return s + stream;
    s += std::string(" ") + hperf::typeName(type);
    if (op != kNoOp) s += std::string(" ") + kOpNames[op];
    s += " count " + std::to_string(count);
    if (hasRoot(coll)) s += " root " + std::to_string(root);
    if (coll == kSendRecv) s += " shift " + std::to_string(shift);
    if (coll == kPair) s += " from " + std::to_string(from) + " to " + std::to_string(to);
    if (coll != kPair) s += inPlace ? " in place" : " out of place";
    if (groupSize > 1)
      s += " in a group of calls " + std::to_string(groupFirst) + " to " + std::to_string(groupFirst + groupSize - 1);
    return s + stream;
  }
};

// A count from 0 to max, uniform in log(count + 1): as many tiny calls as huge ones, odd
// counts throughout.
size_t logUniform(Rng& rng, size_t max) {
  const double u = rng.unit() * std::log2(static_cast<double>(max) + 2);
  const double c = std::floor(std::exp2(u)) - 1;
  return std::min(max, static_cast<size_t>(std::max(0.0, c)));
}

// The same on every rank: every field is drawn every time, so the sequence never depends on
// what one call used.
Call drawCall(Rng& rng, uint64_t index, int nranks, size_t maxBytes) {
  Call c;
  c.index = index;
  c.coll = static_cast<Coll>(rng.below(kNumColls));
  if (c.coll == kPair && nranks == 1) c.coll = kSendRecv;  // a pair needs two ranks
  c.type = kTypes[rng.below(sizeof kTypes / sizeof kTypes[0])];
  const int op = static_cast<int>(rng.below(kNumOps));
  c.op = hasOp(c.coll) ? op : kNoOp;
  const size_t blocks = c.coll == kAllGather || c.coll == kReduceScatter || c.coll == kAllToAll ? nranks : 1;
  const size_t count = logUniform(rng, maxBytes / hperf::typeSize(c.type) / blocks);
  c.count = c.coll == kBarrier ? 0 : count;
  c.root = static_cast<int>(rng.below(static_cast<uint64_t>(nranks)));
  c.inPlace = rng.below(2) != 0;
  c.shift = static_cast<int>(rng.below(static_cast<uint64_t>(nranks)));
  c.from = static_cast<int>(rng.below(static_cast<uint64_t>(nranks)));
  c.to = nranks > 1 ? (c.from + 1 + static_cast<int>(rng.below(static_cast<uint64_t>(nranks - 1)))) % nranks : 0;
  c.salt = rng.next();
  c.groupFirst = index;
  c.groupSalt = c.salt;
  return c;
}

// Up to kMaxGroup calls issued together (horaGroupStart/End): one in eight draws is a group
// of 2 to kMaxGroup calls, which share -e between them. As every draw, the same on every rank.
// A send/recv pair, which only two ranks take part in, joins a group unless
// --no-pairs-in-groups: beside a collective it gives the ranks groups of different sizes, which
// once made them plan that collective differently and hang (src/comm/run.cc plans by the
// collectives of a communicator now).
constexpr uint64_t kMaxGroup = 4;
std::vector<Call> drawGroup(Rng& rng, uint64_t index, uint64_t most, int nranks, size_t maxBytes, bool pairsInGroups) {
  const uint64_t drawn = rng.below(8) == 0 ? 2 + rng.below(kMaxGroup - 1) : 1;
  const uint64_t size = std::max<uint64_t>(1, std::min(drawn, most));
  std::vector<Call> group;
  for (uint64_t j = 0; j < size; ++j) {
    group.push_back(drawCall(rng, index + j, nranks, maxBytes / size));
    group.back().groupFirst = index;
    group.back().groupSize = size;
    group.back().groupSalt = group.front().salt;
    if (size > 1 && group.back().coll == kPair && !pairsInGroups) group.back().coll = kSendRecv;
  }
  return group;
}

// ---- inputs and the reference ------------------------------------------------------

// The inputs of one call, element `index` of rank `rank` (indices of the rank's whole send
// buffer), and what the reduction over all ranks must give.
class Data {
 public:
  Data(const Call& c, int nranks) : type_(c.type), op_(c.op), nranks_(nranks), salt_(c.salt) {
    size_ = hperf::typeSize(type_);
    mask_ = typeMask(size_);
    if (!isFloating(type_) || op_ == kNoOp) return;
    // Sums: each rank's |value| (in units of 1/2 when premul scalars may halve) at most m,
    // n * m within 2^digits. Where even m = 1 is too much, only every k-th rank (by element)
    // is non-zero.
    const double range = std::ldexp(1.0, digits(type_));
    const double perRank = range / (nranks_ * (op_ == kPreMulSum ? 4.0 : 1.0));
    if (perRank >= 1) {
      magnitude_ = static_cast<uint64_t>(std::min(perRank, std::ldexp(1.0, 52)));
    } else {
      magnitude_ = 1;
      sparse_ = static_cast<uint64_t>(std::ceil(1.0 / perRank));
    }
    // Products: at most maxExponent factors of 2 per element.
    twosEvery_ = static_cast<uint64_t>((nranks_ + maxExponent(type_) - 1) / maxExponent(type_));
  }

  size_t size() const { return size_; }

  uint64_t input(int rank, size_t index) const {
    const uint64_t h = hash3(salt_, static_cast<uint64_t>(rank), index);
    if (!isFloating(type_) || op_ == kNoOp) return h & mask_;
    const uint64_t slot = index + static_cast<uint64_t>(rank) + salt_;
    switch (op_) {
      case kMax:
      case kMin: {
        uint64_t bits = h & mask_;
        if (isNaN(type_, bits) && (h >> 60) != 0) bits &= ~(uint64_t{1} << (8 * size_ - 2));  // mostly no NaN
        if (bits == (uint64_t{1} << (8 * size_ - 1))) bits = 0;                                // no -0
        return bits;
      }
      case kProd: {
        const double sign = (h >> 63) ? -1.0 : 1.0;
        if ((h & 31) == 0) return encode(type_, sign * 0.0);
        const bool two = slot % twosEvery_ == 0 && ((h >> 5) & 1);
        return encode(type_, sign * (two ? 2.0 : 1.0));
      }
      default: {  // sum, avg, premulsum
        if (sparse_ > 1 && slot % sparse_ != 0) return encode(type_, 0.0);
        const double v = static_cast<double>(h % (2 * magnitude_ + 1)) - static_cast<double>(magnitude_);
        return encode(type_, v);
      }
    }
  }

  // This rank's premul scalar, as the bytes passed to horaRedOpCreatePreMulSum.
  uint64_t scalar(int rank) const {
    const uint64_t h = hash3(salt_, static_cast<uint64_t>(rank), ~uint64_t{0});
    if (!isFloating(type_)) return h & mask_;
    static const double kScalars[] = {-2, -1, -0.5, 0.5, 1, 2};
    return encode(type_, kScalars[h % 6]);
  }

  // The reduction over all ranks of element `index`: its bits, and whether any NaN will do.
  uint64_t reduced(size_t index, bool* anyNaN) const {
    *anyNaN = false;
    return isFloating(type_) ? reducedFloat(index, anyNaN) : reducedInt(index);
  }

 private:
  uint64_t reducedInt(size_t index) const {
    const int shift = static_cast<int>(64 - 8 * size_);
    const bool sgn = isSignedInt(type_);
    auto wide = [&](uint64_t b) { return sgn ? static_cast<int64_t>(b << shift) >> shift : static_cast<int64_t>(b); };
    uint64_t acc = input(0, index);
    if (op_ == kPreMulSum) acc *= scalar(0);
    for (int q = 1; q < nranks_; ++q) {
      uint64_t x = input(q, index);
      switch (op_) {
        case kProd: acc *= x; break;
        case kMax: acc = (sgn ? wide(x) > wide(acc) : x > acc) ? x : acc; break;
        case kMin: acc = (sgn ? wide(x) < wide(acc) : x < acc) ? x : acc; break;
        case kPreMulSum: acc += x * scalar(q); break;
        default: acc += x; break;  // sum, avg: wrapping (mod 2^64, then the mask: mod 2^bits)
      }
    }
    acc &= mask_;
    if (op_ == kAvg) {  // the truncated quotient of the wrapped sum, as its signedness reads it
      const uint64_t n = static_cast<uint64_t>(nranks_);
      if (sgn) {
        const int64_t x = wide(acc);
        const uint64_t q = (x < 0 ? 0 - static_cast<uint64_t>(x) : static_cast<uint64_t>(x)) / n;
        acc = (x < 0 ? 0 - q : q) & mask_;
      } else {
        acc /= n;
      }
    }
    return acc;
  }

  // The inputs make every partial result exact in any order (see the top of this file), so
  // double arithmetic in rank order gives the library's bits, signed zeros included.
  uint64_t reducedFloat(size_t index, bool* anyNaN) const {
    if (op_ == kMax || op_ == kMin) {
      uint64_t best = input(0, index);
      double bv = decode(type_, best);
      bool nan = std::isnan(bv);
      for (int q = 1; q < nranks_; ++q) {
        const uint64_t b = input(q, index);
        const double v = decode(type_, b);
        nan = nan || std::isnan(v);
        if (op_ == kMax ? v > bv : v < bv) best = b, bv = v;
      }
      *anyNaN = nan;
      return best;
    }
    double acc = decode(type_, input(0, index));
    if (op_ == kPreMulSum) acc *= decode(type_, scalar(0));
    for (int q = 1; q < nranks_; ++q) {
      const double x = decode(type_, input(q, index));
      acc = op_ == kProd ? acc * x : op_ == kPreMulSum ? acc + x * decode(type_, scalar(q)) : acc + x;
    }
    if (op_ == kAvg) {  // one division in the arithmetic type, one rounding to the type
      if (type_ == horaFloat64) return encode(type_, acc / nranks_);
      return encode(type_, static_cast<float>(acc) / static_cast<float>(nranks_));
    }
    return encode(type_, acc);
  }

  horaDataType_t type_;
  int op_;
  int nranks_;
  uint64_t salt_;
  size_t size_ = 1;
  uint64_t mask_ = 0xff;
  uint64_t magnitude_ = 1;
  uint64_t sparse_ = 1;
  uint64_t twosEvery_ = 1;
};

// ---- one rank ----------------------------------------------------------------------

struct Wrong {
  uint64_t call;
  std::string what;  // the call, the buffer and the element
  std::string got, want;
};

struct Failure {
  uint64_t call;
  std::string what;
  horaResult_t result;
  std::string text;
};

constexpr size_t kPad = 64;    // bytes before a buffer (a random part of them is skipped)
constexpr size_t kGuard = 64;  // bytes after the receive buffer that must stay untouched
constexpr size_t kShown = 5;   // wrong results and errors printed per rank

class Soak {
 public:
  Soak(const Options& opt, horaComm_t comm, std::string from) : opt_(opt), comm_(comm), from_(std::move(from)) {}
  int run();
  hora_soak::Round round(uint64_t seed, uint64_t first, uint64_t calls);

 private:
  bool printer() const { return rank_ == 0; }
  void fail(uint64_t call, const std::string& what, horaResult_t r);
  struct Slot;
  void prepare(Slot& s, char* sendArea, char* recvArea);
  horaResult_t issue(Slot& s, horaStream_t st, const char** api);
  void verify(Slot& s);
  bool execute(const std::vector<Call>& group);
  void check(const Call& c, const Data& d, const char* buffer, const void* p, size_t count,
             const std::function<uint64_t(size_t, bool*)>& want);
  int finish(double seconds);

  Options opt_;  // with rank 0's seed, limits and -e
  horaComm_t comm_;
  std::string from_;
  int rank_ = 0, nranks_ = 1;
  uint64_t seed_ = 0;
  std::vector<char> send_, recv_;
  horaStream_t stream_ = nullptr;
  uint64_t attempted_ = 0;  // calls begun (all of the last group's): what replays the run
  uint64_t calls_ = 0, bytes_ = 0, wrongResults_ = 0, wrongElements_ = 0;
  std::vector<Wrong> wrongs_;
  std::vector<Failure> failures_;
  uint64_t failureCount_ = 0;
  bool corrupted_ = false;
  uint64_t wrongBefore_ = 0;  // wrongElements_ before the current call
  double slowest_ = 0;        // seconds from the call until its result is there (not the check)
  std::string slowestCall_;
};

// what: "horaAllReduce in call 7 (allreduce float sum count 5 in place)"
void Soak::fail(uint64_t call, const std::string& what, horaResult_t r) {
  const char* text = horaGetLastError(comm_);
  if (!*text) text = horaGetLastError(nullptr);
  ++failureCount_;
  if (failures_.size() < kShown) failures_.push_back({call, what, r, text});
}

// Compares count elements at p with want(i) (its bits, and whether any NaN will do).
void Soak::check(const Call& c, const Data& d, const char* buffer, const void* p, size_t count,
                 const std::function<uint64_t(size_t, bool*)>& want) {
  const size_t size = d.size();
  for (size_t i = 0; i < count; ++i) {
    bool anyNaN = false;
    const uint64_t w = want(i, &anyNaN);
    const uint64_t g = load(p, i, size);
    if (g == w || (anyNaN && isNaN(c.type, g))) continue;
    if (wrongElements_++ == wrongBefore_ && wrongs_.size() < kShown) {  // the first of this call
      char where[64];
      std::snprintf(where, sizeof where, ": element %zu of %s", i, buffer);
      wrongs_.push_back({c.index, "call " + std::to_string(c.index) + " (" + c.describe(rank_) + ")" + where,
                         showValue(c.type, g), anyNaN ? "NaN (any)" : showValue(c.type, w)});
    }
  }
}

// One call on this rank: where its input and result lie, and what it must leave alone.
struct Soak::Slot {
  Call c;
  Data d;
  size_t in = 0, out = 0;        // this rank's input and result, in elements
  size_t inOff = 0, outOff = 0;  // in place: where they sit in the receive buffer
  size_t recvElems = 0;          // the receive buffer
  size_t skew = 0;               // bytes of the pad before it (an element-aligned offset)
  bool inPlace = false;
  unsigned char poison = 0;      // the bytes around (and, before the call, in) the receive buffer
  char* area = nullptr;          // the pad, the receive buffer and the guard after it
  char* sendBase = nullptr;
  char* input = nullptr;
  char* output = nullptr;
  horaRedOp_t op = horaSum;
  bool created = false;  // op is a premul-sum this rank created
  Slot(const Call& call, int nranks) : c(call), d(call, nranks) {}
  size_t areaBytes() const { return kPad + recvElems * d.size() + kGuard; }
};

// Lays out call s.c in the areas given (kPad + its buffer + kGuard bytes each), poisons the
// receive area and writes this rank's input.
void Soak::prepare(Slot& s, char* sendArea, char* recvArea) {
  const Call& c = s.c;
  const int r = rank_;
  const size_t ts = s.d.size(), C = c.count, N = static_cast<size_t>(nranks_);
  switch (c.coll) {
    case kAllReduce: case kSendRecv: s.in = s.out = C; break;
    case kBroadcast: s.in = r == c.root ? C : 0; s.out = C; break;
    case kReduce: s.in = C; s.out = C; break;
    case kAllGather: s.in = C; s.out = N * C; s.inOff = r * C; break;
    case kReduceScatter: s.in = N * C; s.out = C; s.outOff = r * C; break;
    case kAllToAll: s.in = s.out = N * C; break;
    case kPair: s.in = r == c.from ? C : 0; s.out = r == c.to ? C : 0; break;
    case kBarrier: case kNumColls: break;
  }
  s.inPlace = c.inPlace && c.coll != kPair;
  if (!s.inPlace) s.inOff = s.outOff = 0;
  s.recvElems = s.inPlace ? std::max(s.in + s.inOff, s.out + s.outOff) : s.out;
  s.skew = (hash3(c.salt, static_cast<uint64_t>(r), 7) % (kPad / ts)) * ts;
  s.poison = static_cast<unsigned char>(c.salt >> 56) | 1;
  s.area = recvArea;
  std::memset(recvArea, s.poison, s.areaBytes());
  s.sendBase = sendArea + s.skew;
  char* recvBase = recvArea + s.skew;
  s.input = s.inPlace ? recvBase + s.inOff * ts : s.sendBase;
  s.output = recvBase + s.outOff * ts;
  for (size_t i = 0; i < s.in; ++i) store(s.input, i, ts, s.d.input(r, i));
}

// Issues call s.c; api names the entry point for an error.
horaResult_t Soak::issue(Slot& s, horaStream_t st, const char** api) {
  const Call& c = s.c;
  const int n = nranks_, r = rank_;
  const size_t C = c.count;
  const horaRedOp_t op = s.op;
  const void* sendArg = s.inPlace ? s.input : s.sendBase;
  void* recvArg = s.inPlace ? (c.coll == kAllGather || c.coll == kReduceScatter ? s.output : s.input) : s.output;
  switch (c.coll) {
    case kAllReduce: *api = "horaAllReduce"; return horaAllReduce(sendArg, recvArg, C, c.type, op, comm_, st);
    case kBroadcast: *api = "horaBroadcast"; return horaBroadcast(sendArg, recvArg, C, c.type, c.root, comm_, st);
    case kReduce: *api = "horaReduce"; return horaReduce(sendArg, recvArg, C, c.type, op, c.root, comm_, st);
    case kAllGather: *api = "horaAllGather"; return horaAllGather(sendArg, recvArg, C, c.type, comm_, st);
    case kReduceScatter: *api = "horaReduceScatter"; return horaReduceScatter(sendArg, recvArg, C, c.type, op, comm_, st);
    case kAllToAll: *api = "horaAllToAll"; return horaAllToAll(sendArg, recvArg, C, c.type, comm_, st);
    case kSendRecv: {
      *api = "horaSend/horaRecv (group)";
      horaResult_t res = horaGroupStart();
      if (res != horaSuccess) return res;
      horaResult_t sent = horaSend(sendArg, C, c.type, (r + c.shift) % n, comm_, st);
      horaResult_t received = horaRecv(recvArg, C, c.type, (r - c.shift + n) % n, comm_, st);
      res = horaGroupEnd();
      return res != horaSuccess ? res : sent != horaSuccess ? sent : received;
    }
    case kPair:
      if (r == c.from) return *api = "horaSend", horaSend(sendArg, C, c.type, c.to, comm_, st);
      if (r == c.to) return *api = "horaRecv", horaRecv(recvArg, C, c.type, c.from, comm_, st);
      return horaSuccess;
    case kBarrier: *api = "horaBarrier"; return horaBarrier(comm_, st);
    case kNumColls: break;
  }
  return horaSuccess;
}

// Checks what call s.c did on this rank.
void Soak::verify(Slot& s) {
  const Call& c = s.c;
  const Data& d = s.d;
  const int n = nranks_, r = rank_;
  const size_t ts = d.size(), C = c.count;
  // What a non-root's Reduce must leave alone: its receive buffer out of place, its input in place.
  const bool reduceNonRoot = c.coll == kReduce && r != c.root;
  size_t result = reduceNonRoot ? 0 : s.out;  // elements that this call delivered here
  bytes_ += result * ts;
  if (opt_.corruptCall >= 0 && !corrupted_ && r == opt_.corruptRank &&
      c.index >= static_cast<uint64_t>(opt_.corruptCall) && result > 0) {
    corrupted_ = true;
    const size_t i = hash3(c.salt, 1, 2) % result;
    s.output[i * ts + ts - 1] ^= static_cast<char>(0xff);  // the top byte: sign and exponent
    std::fprintf(stderr, "%s: rank %d: corrupting element %zu of the result of call %" PRIu64 " (test hook)\n",
                 kProgram, r, i, c.index);
  }

  wrongBefore_ = wrongElements_;
  auto reducedAt = [&](size_t base) {
    return [&d, base](size_t i, bool* anyNaN) { return d.reduced(base + i, anyNaN); };
  };
  auto inputOf = [&d](int q, size_t base) {
    return [&d, q, base](size_t i, bool* anyNaN) {
      *anyNaN = false;
      return d.input(q, base + i);
    };
  };
  const unsigned char poison = s.poison;
  switch (c.coll) {
    case kAllReduce: check(c, d, "the result", s.output, C, reducedAt(0)); break;
    case kBroadcast: check(c, d, "the result", s.output, C, inputOf(c.root, 0)); break;
    case kReduce:
      if (!reduceNonRoot) check(c, d, "the result", s.output, C, reducedAt(0));
      else if (s.inPlace) check(c, d, "a non-root's buffer (in place)", s.input, C, inputOf(r, 0));
      else check(c, d, "a non-root's recvbuff", s.output, C, [&](size_t, bool* a) {
          *a = false;
          uint64_t p = 0;
          std::memset(&p, poison, ts);
          return p;
        });
      break;
    case kAllGather:
      for (int q = 0; q < n; ++q)
        check(c, d, ("the result, block " + std::to_string(q)).c_str(), s.output + q * C * ts, C, inputOf(q, 0));
      break;
    case kReduceScatter: check(c, d, "the result", s.output, C, reducedAt(r * C)); break;
    case kAllToAll:
      for (int q = 0; q < n; ++q)
        check(c, d, ("the result, block " + std::to_string(q)).c_str(), s.output + q * C * ts, C, inputOf(q, r * C));
      break;
    case kSendRecv: check(c, d, "the result", s.output, C, inputOf((r - c.shift + n) % n, 0)); break;
    case kPair:
      if (r == c.to) check(c, d, "the result", s.output, C, inputOf(c.from, 0));
      break;
    case kBarrier: case kNumColls: break;
  }
  // Nothing outside the buffers is touched, and out of place the input is not either.
  const size_t end = s.skew + s.recvElems * ts;
  for (size_t b = 0; b < s.areaBytes(); ++b) {
    if (b >= s.skew && b < end) continue;
    if (static_cast<unsigned char>(s.area[b]) != poison) {
      ++wrongElements_;
      if (wrongs_.size() < kShown)
        wrongs_.push_back({c.index, "call " + std::to_string(c.index) + " (" + c.describe(r) + "): byte " +
                                        std::to_string(static_cast<long long>(b) - static_cast<long long>(s.skew)) +
                                        " outside recvbuff written",
                           std::to_string(static_cast<unsigned char>(s.area[b])), std::to_string(poison)});
      break;
    }
  }
  if (!s.inPlace && s.in > 0) check(c, d, "sendbuff (out of place: must not change)", s.input, s.in, inputOf(r, 0));
  if (wrongElements_ > wrongBefore_) ++wrongResults_;
}

// Makes the calls of one group (or one call) on this rank and checks what they did. False
// when a call failed: the communicator may then be unusable, so the run stops.
bool Soak::execute(const std::vector<Call>& group) {
  const int r = rank_;
  std::vector<Slot> slots;
  slots.reserve(group.size());
  size_t offset = 0;
  for (const Call& c : group) {
    slots.emplace_back(c, nranks_);
    prepare(slots.back(), send_.data() + offset, recv_.data() + offset);
    offset += std::max(slots.back().areaBytes(), kPad + slots.back().in * slots.back().d.size() + kGuard);
  }
  auto describe = [&](const Call& c) { return " in call " + std::to_string(c.index) + " (" + c.describe(r) + ")"; };
  bool ok = true;
  for (Slot& s : slots) {
    if (s.c.op >= 0 && s.c.op < kPreMulSum) s.op = static_cast<horaRedOp_t>(s.c.op);
    if (s.c.op != kPreMulSum || !ok) continue;
    uint64_t scalar = s.d.scalar(r);
    horaResult_t res = horaRedOpCreatePreMulSum(&s.op, &scalar, s.c.type, horaScalarHostImmediate, comm_);
    s.created = res == horaSuccess;
    if (!s.created) fail(s.c.index, "horaRedOpCreatePreMulSum" + describe(s.c), res), ok = false;
  }

  horaStream_t st = group.front().onStream(r) ? stream_ : nullptr;
  horaResult_t res = horaSuccess;
  const char* api = "";
  const Call* culprit = &group.front();
  const auto t0 = std::chrono::steady_clock::now();
  if (ok) {
    const bool grouped = slots.size() > 1;
    if (grouped) res = horaGroupStart(), api = "horaGroupStart";
    for (Slot& s : slots) {
      if (res != horaSuccess) break;
      res = issue(s, st, &api);
      culprit = &s.c;
    }
    if (grouped) {  // the first error of the calls, else horaGroupEnd's
      horaResult_t ended = horaGroupEnd();
      if (res == horaSuccess && ended != horaSuccess) res = ended, api = "horaGroupEnd", culprit = &group.front();
    }
    if (st && res == horaSuccess) {  // the queued work, which uses the ops and the buffers
      res = horaStreamSynchronize(st);
      if (res != horaSuccess) api = "horaStreamSynchronize", culprit = &group.front();
    }
  }
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (ok && took > slowest_) slowest_ = took, slowestCall_ = "call " + std::to_string(group.front().index) + " (" + group.front().describe(r) + ")";
  for (Slot& s : slots) {
    if (!s.created) continue;
    horaResult_t destroyed = horaRedOpDestroy(s.op, comm_);
    if (ok && res == horaSuccess && destroyed != horaSuccess) res = destroyed, api = "horaRedOpDestroy", culprit = &s.c;
  }
  if (!ok) return false;
  if (res != horaSuccess) {
    fail(culprit->index, api + describe(*culprit), res);
    return false;
  }
  for (Slot& s : slots) verify(s);
  return true;
}

int Soak::run() {
  if (horaCommUserRank(comm_, &rank_) != horaSuccess || horaCommCount(comm_, &nranks_) != horaSuccess) {
    std::fprintf(stderr, "%s: horaCommUserRank/horaCommCount failed: %s\n", kProgram, horaGetLastError(comm_));
    return 1;
  }
  // Rank 0's seed (given, or drawn) and limits for everyone: every rank then draws the same
  // calls, even where a launcher gave the ranks different command lines.
  struct {
    uint64_t seed, calls, maxBytes;
    double seconds;
  } shared{};
  if (printer()) {
    shared.seed = opt_.seedGiven ? opt_.seed
                                 : std::random_device{}() ^ (static_cast<uint64_t>(std::random_device{}()) << 32);
    shared.calls = opt_.calls;
    shared.maxBytes = opt_.maxBytes;
    shared.seconds = opt_.seconds;
  }
  horaResult_t init = horaBroadcast(&shared, &shared, sizeof shared, horaUint8, 0, comm_, nullptr);
  if (init != horaSuccess) {
    std::fprintf(stderr, "%s: rank %d: horaBroadcast of the seed failed: %s: %s\n", kProgram, rank_,
                 horaGetErrorString(init), horaGetLastError(comm_));
    horaCommAbort(comm_);
    return 1;
  }
  seed_ = shared.seed;
  opt_.calls = shared.calls;
  opt_.maxBytes = static_cast<size_t>(shared.maxBytes);
  opt_.seconds = shared.seconds;
  if (printer()) {
    int version = 0;
    horaGetVersion(&version);
    std::string limit = opt_.calls ? std::to_string(opt_.calls) + " calls" : "";
    if (opt_.seconds > 0) limit += (limit.empty() ? "" : " or ") + std::to_string(static_cast<long long>(opt_.seconds)) + " s";
    std::printf("%s: Hora %d.%d.%d, %d rank%s from %s; seed %" PRIu64 "%s, buffers up to %zu bytes, %s\n", kProgram,
                version / 10000, version / 100 % 100, version % 100, nranks_, nranks_ == 1 ? "" : "s", from_.c_str(), seed_,
                opt_.seedGiven ? "" : " (drawn)", opt_.maxBytes, limit.c_str());
    std::fflush(stdout);
  }
  try {
    send_.assign(kMaxGroup * (kPad + kGuard) + opt_.maxBytes, 0);
    recv_.assign(kMaxGroup * (kPad + kGuard) + opt_.maxBytes, 0);
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "%s: rank %d: cannot allocate two buffers of %zu bytes (-e)\n", kProgram, rank_, opt_.maxBytes);
    horaCommAbort(comm_);
    return 1;
  }

  horaResult_t made = horaStreamCreate(&stream_);
  if (made != horaSuccess) {
    std::fprintf(stderr, "%s: rank %d: horaStreamCreate failed: %s: %s\n", kProgram, rank_, horaGetErrorString(made),
                 horaGetLastError(nullptr));
    horaCommAbort(comm_);
    return 1;
  }

  Rng rng(seed_);
  const auto t0 = std::chrono::steady_clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
  double nextProgress = 30;
  const bool timed = opt_.seconds > 0;
  for (uint64_t k = 0;;) {
    if (!timed && k >= opt_.calls) break;
    if (timed) {  // rank 0's clock decides for everyone
      int32_t go = 0;
      if (printer()) go = elapsed() < opt_.seconds && (opt_.calls == 0 || k < opt_.calls);
      horaResult_t r = horaBroadcast(&go, &go, 1, horaInt32, 0, comm_, nullptr);
      if (r != horaSuccess) {
        fail(k, "horaBroadcast (whether to go on) before call " + std::to_string(k), r);
        break;
      }
      if (!go) break;
    }
    const std::vector<Call> group = drawGroup(rng, k, opt_.calls ? opt_.calls - k : kMaxGroup, nranks_, opt_.maxBytes, opt_.pairsInGroups);
    if (opt_.verbose && printer()) {
      for (const Call& c : group) std::printf("%s: call %" PRIu64 ": %s\n", kProgram, c.index, c.describe(rank_).c_str());
      std::fflush(stdout);
    }
    attempted_ = k + group.size();
    if (!execute(group)) break;
    k += group.size();
    calls_ += group.size();
    if (printer() && timed && elapsed() >= nextProgress) {
      std::printf("%s: %.0f s: %" PRIu64 " calls, %" PRIu64 " wrong results and %" PRIu64 " errors on rank 0\n",
                  kProgram, elapsed(), calls_, wrongResults_, failureCount_);
      std::fflush(stdout);
      nextProgress += 30;
    }
  }
  return finish(elapsed());
}

// One round of a chaos run: no seed to share (the controller gave every rank the same), no
// totals, the communicator left as it is.
hora_soak::Round Soak::round(uint64_t seed, uint64_t first, uint64_t calls) {
  hora_soak::Round out;
  if (horaCommUserRank(comm_, &rank_) != horaSuccess || horaCommCount(comm_, &nranks_) != horaSuccess) {
    out.error = horaInvalidUsage;
    out.errorCall = "horaCommUserRank/horaCommCount";
    out.errorText = horaGetLastError(comm_);
    return out;
  }
  seed_ = seed;
  send_.assign(kMaxGroup * (kPad + kGuard) + opt_.maxBytes, 0);
  recv_.assign(kMaxGroup * (kPad + kGuard) + opt_.maxBytes, 0);
  horaResult_t made = horaStreamCreate(&stream_);
  if (made != horaSuccess) {
    out.error = made;
    out.errorCall = "horaStreamCreate";
    out.errorText = horaGetLastError(nullptr);
    return out;
  }
  Rng rng(hash3(seed, first, 0xc4a05));
  for (uint64_t k = first; k < first + calls;) {
    const std::vector<Call> group = drawGroup(rng, k, first + calls - k, nranks_, opt_.maxBytes, opt_.pairsInGroups);
    if (!execute(group)) break;
    k += group.size();
    calls_ += group.size();
  }
  horaStreamDestroy(stream_);  // its work has finished (synchronized), failed or not
  stream_ = nullptr;
  out.calls = calls_;
  out.wrongResults = wrongResults_;
  if (!wrongs_.empty()) out.firstWrong = wrongs_.front().what + ": got " + wrongs_.front().got + ", want " + wrongs_.front().want;
  if (!failures_.empty()) {
    out.error = failures_.front().result;
    out.errorCall = failures_.front().what;
    out.errorText = failures_.front().text;
  }
  return out;
}

std::string human(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  int u = 0;
  while (bytes >= 1024 && u < 5) bytes /= 1024, ++u;
  char buf[32];
  std::snprintf(buf, sizeof buf, u ? "%.2f %s" : "%.0f %s", bytes, units[u]);
  return buf;
}

// Every rank with a problem prints its own lines; then rank 0 the totals over all ranks.
int Soak::finish(double seconds) {
  const bool bad = wrongResults_ > 0 || failureCount_ > 0;
  if (bad) {
    std::string lines;
    char head[256];
    std::snprintf(head, sizeof head,
                  "%s: rank %d: %" PRIu64 " calls, %" PRIu64 " wrong results (%" PRIu64 " elements), %" PRIu64 " errors\n",
                  kProgram, rank_, calls_, wrongResults_, wrongElements_, failureCount_);
    lines += head;
    for (const Wrong& w : wrongs_)
      lines += std::string(kProgram) + ": rank " + std::to_string(rank_) + ": wrong: " + w.what + ": got " + w.got +
               ", want " + w.want + "\n";
    for (const Failure& f : failures_)
      lines += std::string(kProgram) + ": rank " + std::to_string(rank_) + ": error: " + f.what + ": " +
               horaGetErrorString(f.result) + " (" + std::to_string(static_cast<int>(f.result)) + "): " + f.text + "\n";
    std::fputs(lines.c_str(), stdout);
    std::fflush(stdout);
  }
  // Totals: a failed run may have left the communicator unusable; then rank 0 says so.
  uint64_t totals[5] = {bytes_, wrongResults_, wrongElements_, failureCount_, bad ? 1u : 0u};
  horaResult_t r = failureCount_ ? horaInternalError : horaAllReduce(totals, totals, 5, horaUint64, horaSum, comm_, nullptr);
  const bool ok = r == horaSuccess && totals[1] == 0 && totals[3] == 0;
  if (printer()) {
    if (r != horaSuccess)
      std::printf("%s: totals over all ranks unavailable (%s); rank 0's own follow\n", kProgram,
                  failureCount_ ? "the run stopped on an error" : horaGetLastError(comm_));
    std::printf("%s: %" PRIu64 " calls in %.1f s on %d rank%s: %" PRIu64 " bytes moved (%s), %" PRIu64
                " wrong results (%" PRIu64 " elements), %" PRIu64 " errors%s: %s\n",
                kProgram, calls_, seconds, nranks_, nranks_ == 1 ? "" : "s", totals[0], human(static_cast<double>(totals[0])).c_str(), totals[1],
                totals[2], totals[3], r == horaSuccess ? "" : " (rank 0 only)", ok ? "PASSED" : "FAILED");
    std::printf("%s: replay: %s -s %" PRIu64 " -c %" PRIu64 " -e %zu on %d ranks\n", kProgram, kProgram, seed_,
                attempted_, opt_.maxBytes, nranks_);
    if (!slowestCall_.empty())
      std::printf("%s: slowest on rank 0: %s, %.3f s\n", kProgram, slowestCall_.c_str(), slowest_);
    std::fflush(stdout);
  }
  if (r == horaSuccess) {
    horaBarrier(comm_, nullptr);  // so that no rank exits (and a launcher stops the rest) before rank 0 printed
    horaStreamDestroy(stream_);
    horaCommDestroy(comm_);
  } else {
    horaCommAbort(comm_);  // first, so that work still queued on the stream fails at once
    horaStreamDestroy(stream_);
  }
  return ok && !bad ? 0 : 1;
}

}  // namespace

bool hora_soak::parseUnsigned(const char* text, uint64_t lo, uint64_t hi, uint64_t* out) {
  errno = 0;
  char* end = nullptr;
  const unsigned long long v = std::strtoull(text, &end, 0);
  if (!*text || *text == '-' || *end || errno != 0 || v < lo || v > hi) return false;
  *out = v;
  return true;
}

hora_soak::Round hora_soak::soakRound(horaComm_t comm, uint64_t seed, uint64_t first, uint64_t calls, size_t maxBytes) {
  Options opt;
  opt.maxBytes = maxBytes;
  Soak soak(opt, comm, "chaos");
  return soak.round(seed, first, calls);
}

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i)  // --chaos has options of its own (hora_soak_chaos.cc)
    if (!std::strcmp(argv[i], "--chaos") || !std::strcmp(argv[i], "--chaos-rank")) return hora_soak::chaosMain(argc, argv);
  const Options opt = parseOptions(argc, argv);
  // Ranks from a launcher (horaCommInitFromEnv), else -N threads (or one rank), as the perf tools.
  const hperf::Launcher launcher = hperf::findLauncher();
  const bool launched = launcher.hora() || launcher.size > 1;
  if (launched && opt.threads > 0)
    badUsage("-N runs ranks as threads; it cannot be combined with a launcher (" + launcher.describe() + ")");
  if (launched) {
    horaComm_t comm = nullptr;
    horaResult_t r = horaCommInitFromEnv(&comm);
    if (r != horaSuccess) {
      std::fprintf(stderr, "%s: rank %s: horaCommInitFromEnv failed: %s: %s\n", kProgram, launcher.rank(),
                   horaGetErrorString(r), horaGetLastError(nullptr));
      if (!launcher.hora())
        std::fprintf(stderr, "%s: started by %s: give every rank HORA_ROOT=<rank 0's host>:<port> and HORA_SECRET\n",
                     kProgram, launcher.describe().c_str());
      return 1;
    }
    Soak soak(opt, comm, launcher.describe());
    return soak.run();
  }
  const int n = opt.threads > 0 ? opt.threads : 1;
  std::vector<horaComm_t> comms(static_cast<size_t>(n), nullptr);
  horaResult_t r = horaCommInitAll(comms.data(), n, nullptr);
  if (r != horaSuccess) {
    std::fprintf(stderr, "%s: horaCommInitAll(%d) failed: %s: %s\n", kProgram, n, horaGetErrorString(r),
                 horaGetLastError(nullptr));
    return 1;
  }
  const std::string from = opt.threads > 0 ? "threads (-N " + std::to_string(n) + ")" : "one process (no launcher)";
  std::vector<int> status(static_cast<size_t>(n), 0);
  std::vector<std::thread> workers;
  for (int i = 0; i < n; ++i)
    workers.emplace_back([&, i] {
      Soak soak(opt, comms[static_cast<size_t>(i)], from);
      status[static_cast<size_t>(i)] = soak.run();
    });
  for (auto& w : workers) w.join();
  return *std::max_element(status.begin(), status.end());
}
