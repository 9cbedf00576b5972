/* nccl_app's helpers (nccl_app_common.h): the job's state and buffers, data types and their
 * encodings, inputs and references, and the checks of a result. */
#include "nccl_app_common.h"

/* ---- checks, counted per process and section in memory shared with the parent ---------------- */

const char* const sectName[NSECT] = {"basics", "collectives", "premulsum", "p2p", "groups", "badinput",
                                     "register", "split", "nonblocking", "scalable", "shrink", "fault",
                                     "initall"};

Tally* g_tally;
int g_slot;
int g_sect;
int g_rank = -1;
int g_printed;

/* ---- the job ------------------------------------------------------------------------------ */

int g_n;
int g_device;
ncclComm_t g_comm;
size_t g_cap;
unsigned char* g_send;
unsigned char* g_recv;
unsigned char* g_want;
unsigned char* g_input;

void* bufAlloc(size_t bytes) {
  void* p = NULL;
  if (g_device) {
    ncclResult_t r = ncclMemAlloc(&p, bytes);
    EXPECT(r == ncclSuccess && p, "ncclMemAlloc(%zu) returned %d: %s", bytes, (int)r, ncclGetLastError(NULL));
    if (r != ncclSuccess || !p) {
      fprintf(stderr, "nccl_app rank %d: no device memory (device buffers need a GPU, or HORA_CUDA=emulate)\n",
              g_rank);
      exit(1);
    }
  } else {
    p = malloc(bytes);
    if (!p) exit(1);
  }
  return p;
}

void bufFree(void* p) {
  if (g_device) {
    OK(ncclMemFree(p), NULL);
  } else {
    free(p);
  }
}

/* Waits for a non-blocking operation on comm (ret is what the call returned) and returns how it
 * ended: as NCCL's examples do, ncclCommGetAsyncError until it says something else than
 * ncclInProgress. */
ncclResult_t settle(ncclComm_t comm, ncclResult_t ret) {
  ncclResult_t state = ncclInProgress;
  if (ret != ncclInProgress) return ret;
  while (state == ncclInProgress) {
    ncclResult_t r = ncclCommGetAsyncError(comm, &state);
    if (r != ncclSuccess) return r;
    if (state == ncclInProgress) usleep(1000);
  }
  return state;
}

/* ---- data types and their encodings -------------------------------------------------------- */

const ncclDataType_t allTypes[] = {ncclInt8,    ncclUint8,   ncclInt32,      ncclUint32,
                                          ncclInt64,   ncclUint64,  ncclFloat16,    ncclFloat32,
                                          ncclFloat64, ncclBfloat16, ncclFloat8e4m3, ncclFloat8e5m2};
const int nTypes = (int)(sizeof allTypes / sizeof *allTypes);
const ncclRedOp_t allOps[] = {ncclSum, ncclProd, ncclMax, ncclMin, ncclAvg};
const int nOps = (int)(sizeof allOps / sizeof *allOps);

const char* typeName(ncclDataType_t t) {
  static const char* const names[] = {"int8",    "uint8",   "int32",    "uint32",   "int64",    "uint64",
                                      "float16", "float32", "float64", "bfloat16", "fp8e4m3", "fp8e5m2"};
  return (int)t >= 0 && (int)t < NTYPES ? names[t] : "?";
}
const char* opName(ncclRedOp_t op) {
  static const char* const names[] = {"sum", "prod", "max", "min", "avg"};
  return (int)op >= 0 && (int)op < NOPS ? names[op] : "premulsum";
}

size_t sizeOf(ncclDataType_t t) {
  switch (t) {
    case ncclInt8: case ncclUint8: case ncclFloat8e4m3: case ncclFloat8e5m2: return 1;
    case ncclFloat16: case ncclBfloat16: return 2;
    case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
    default: return 8;
  }
}
int isUnsigned(ncclDataType_t t) {
  return t == ncclUint8 || t == ncclUint32 || t == ncclUint64;
}
int isFloating(ncclDataType_t t) {
  return t == ncclFloat16 || t == ncclFloat32 || t == ncclFloat64 || t == ncclBfloat16 || t == ncclFloat8e4m3 ||
         t == ncclFloat8e5m2;
}
int isFp8(ncclDataType_t t) { return t == ncclFloat8e4m3 || t == ncclFloat8e5m2; }

/* An integer v in a binary floating format of ebits exponent and mbits mantissa bits (bias
 * 2^(ebits-1) - 1, an implicit leading 1): half (5, 10), bfloat16 (8, 7), fp8 e4m3 (4, 3) and
 * e5m2 (5, 2). The small integers used here are normal numbers, far from each format's limits
 * (e4m3's largest is 448), and must be exact: an inexact one is a bug of this program. */
unsigned encodeInt(long v, int ebits, int mbits) {
  unsigned sign = v < 0 ? 1u : 0u;
  unsigned long m = (unsigned long)(v < 0 ? -v : v);
  int e = 0;
  unsigned long frac;
  if (m == 0) return 0;
  while ((m >> e) > 1) ++e;
  if (e > mbits && (m & ((1ul << (e - mbits)) - 1)) != 0) {
    fprintf(stderr, "nccl_app: %ld is not exact with %d mantissa bits (a bug of the test)\n", v, mbits);
    abort();
  }
  frac = m - (1ul << e);
  frac = e >= mbits ? frac >> (e - mbits) : frac << (mbits - e);
  return (sign << (ebits + mbits)) | ((unsigned)(e + (1 << (ebits - 1)) - 1) << mbits) | (unsigned)frac;
}

/* Stores the value v (an integer for every type but float32 and float64, which take halves too) as
 * element i of buffer b of type t. */
void put(ncclDataType_t t, void* b, size_t i, double v) {
  long long iv = (long long)v;
  if (!(t == ncclFloat32 || t == ncclFloat64) && (double)iv != v) {
    fprintf(stderr, "nccl_app: %g is not an integer (a bug of the test)\n", v);
    abort();
  }
  switch (t) {
    case ncclInt8: ((int8_t*)b)[i] = (int8_t)iv; break;
    case ncclUint8: ((uint8_t*)b)[i] = (uint8_t)iv; break;
    case ncclInt32: ((int32_t*)b)[i] = (int32_t)iv; break;
    case ncclUint32: ((uint32_t*)b)[i] = (uint32_t)iv; break;
    case ncclInt64: ((int64_t*)b)[i] = (int64_t)iv; break;
    case ncclUint64: ((uint64_t*)b)[i] = (uint64_t)iv; break;
    case ncclFloat16: ((uint16_t*)b)[i] = (uint16_t)encodeInt((long)iv, 5, 10); break;
    case ncclBfloat16: ((uint16_t*)b)[i] = (uint16_t)encodeInt((long)iv, 8, 7); break;
    case ncclFloat8e4m3: ((uint8_t*)b)[i] = (uint8_t)encodeInt((long)iv, 4, 3); break;
    case ncclFloat8e5m2: ((uint8_t*)b)[i] = (uint8_t)encodeInt((long)iv, 5, 2); break;
    case ncclFloat32: ((float*)b)[i] = (float)v; break;
    case ncclFloat64: ((double*)b)[i] = v; break;
    default: abort();
  }
}

/* ---- inputs and references ------------------------------------------------------------------
 * Rank r's element j of a reduction with op, chosen so that every partial result, in any order
 * an algorithm may combine them, is exact in the type with up to MAX_RANKS ranks (integer types
 * may wrap: they wrap like the reference's conversion, modulo 2^bits):
 *   sum: -3..3 (unsigned 0..3); fp8 -a..a with n * a at most 16 (e4m3) or 8 (e5m2), the largest
 *        integers either holds with all below;
 *   prod: +-1..3 (unsigned 1..3): products 2^a 3^b, at most 81 up to 4 ranks; fp8 and more ranks
 *        +-1, +-2: powers of two;
 *   max, min: -4..4 (unsigned 0..8);
 *   avg: integers -7..7 (unsigned 0..14), whose average is the truncated quotient; floating types
 *        2 * ((r + j) % n) (+ 2 * (j % 3) beyond fp8), whose sum is a multiple of n (fp8 beyond 4
 *        ranks: the same j % 3 on every rank). */
long valueOf(ncclDataType_t t, ncclRedOp_t op, int r, size_t j) {
  static const long prodSigned[] = {-3, -2, -1, 1, 2, 3}, prodPow2[] = {-2, -1, 1, 2};
  unsigned long h = (unsigned long)r * 131ul + (unsigned long)j * 7ul + (j / 3) * 5ul + 17ul;
  long a;
  switch (op) {
    case ncclSum:
      if (isUnsigned(t)) return (long)(h % 4);
      a = t == ncclFloat8e4m3 ? 16 / g_n : t == ncclFloat8e5m2 ? 8 / g_n : 3;
      if (a > 3) a = 3;
      return (long)(h % (unsigned long)(2 * a + 1)) - a;
    case ncclProd:
      if (isUnsigned(t)) return 1 + (long)(h % 3);
      if (isFp8(t) || (isFloating(t) && g_n > 4)) return prodPow2[h % 4];
      return prodSigned[h % 6];
    case ncclMax:
    case ncclMin:
      return isUnsigned(t) ? (long)(h % 9) : (long)(h % 9) - 4;
    case ncclAvg:
      if (!isFloating(t)) return isUnsigned(t) ? (long)(h % 15) : (long)(h % 15) - 7;
      if (isFp8(t) && g_n > 4) return (long)(j % 3);
      return 2 * (long)(((size_t)r + j) % (size_t)g_n) + (isFp8(t) ? 0 : 2 * (long)(j % 3));
    default:
      return 0;
  }
}

/* PreMulSum: the scalar of each rank (as a double) while such an op is in use; inputs are sum's. */
int g_premul;
double g_scalar[MAX_RANKS];

double reduceRef(ncclDataType_t t, ncclRedOp_t op, size_t j) {
  double acc;
  int r;
  if (g_premul) {
    acc = 0;
    for (r = 0; r < g_n; ++r) acc += g_scalar[r] * (double)valueOf(t, ncclSum, r, j);
    return acc;
  }
  acc = (double)valueOf(t, op, 0, j);
  for (r = 1; r < g_n; ++r) {
    double x = (double)valueOf(t, op, r, j);
    if (op == ncclProd) acc *= x;
    else if (op == ncclMax) acc = x > acc ? x : acc;
    else if (op == ncclMin) acc = x < acc ? x : acc;
    else acc += x;
  }
  if (op == ncclAvg) {
    if (isFloating(t)) return acc / g_n; /* exact by the choice of inputs */
    return (double)((long long)acc / g_n); /* the truncated quotient */
  }
  return acc;
}

/* Inputs of the collectives that only move data: bytes that differ by rank, element and byte (a
 * move never interprets them). */
static unsigned char patternByte(int r, size_t j, size_t k) {
  return (unsigned char)((unsigned)r * 37u + (unsigned)j * 11u + (unsigned)k * 3u + 1u);
}

/* Rank r's element j of an input: a value for a reduction, bytes for a move. */
static void inputElem(int reducing, ncclDataType_t t, ncclRedOp_t op, int r, size_t j, unsigned char* dst) {
  size_t k, e = sizeOf(t);
  if (reducing) {
    put(t, dst, 0, (double)valueOf(t, g_premul ? ncclSum : op, r, j));
    return;
  }
  for (k = 0; k < e; ++k) dst[k] = patternByte(r, j, k);
}

/* Fills elements [0, count) of dst with rank r's input elements [first, first + count). */
void fillInput(int reducing, ncclDataType_t t, ncclRedOp_t op, int r, size_t first, size_t count,
               unsigned char* dst) {
  size_t j, e = sizeOf(t);
  for (j = 0; j < count; ++j) inputElem(reducing, t, op, r, first + j, dst + j * e);
}

/* Compares got with want (bytes bytes): one check. */
void expectEqual(const unsigned char* got, const unsigned char* want, size_t bytes, size_t elem, const char* what) {
  size_t i;
  for (i = 0; i < bytes; ++i)
    if (got[i] != want[i]) break;
  EXPECT(i == bytes, "%s: element %zu is wrong (byte %zu: got 0x%02x, want 0x%02x)", what, i / elem, i,
         i < bytes ? got[i] : 0, i < bytes ? want[i] : 0);
}

void expectUntouched(const unsigned char* got, size_t bytes, const char* what) {
  size_t i;
  for (i = 0; i < bytes; ++i)
    if (got[i] != SENTINEL) break;
  EXPECT(i == bytes, "%s: byte %zu of a buffer the call must not touch changed", what, i);
}

/* The result, and the GUARD bytes after it untouched. */
void expectBytes(const unsigned char* got, const unsigned char* want, size_t bytes, size_t elem, const char* what) {
  expectEqual(got, want, bytes, elem, what);
  expectUntouched(got + bytes, GUARD, what);
}
/* ---- a check of a communicator ------------------------------------------------------------- */

/* An AllReduce (int32 sum of rank + 1 + j) on comm of nranks ranks, as rank `me` of it. */
void checkAllReduce(ncclComm_t comm, int nranks, int me, const char* what) {
  enum { C = 257 };
  int32_t* s = bufAlloc(C * sizeof(int32_t));
  int32_t* r = bufAlloc(C * sizeof(int32_t));
  int j, bad = -1;
  ncclResult_t ret;
  for (j = 0; j < C; ++j) {
    s[j] = me + 1 + j;
    r[j] = -1;
  }
  ret = settle(comm, ncclAllReduce(s, r, C, ncclInt32, ncclSum, comm, NULL));
  EXPECT(ret == ncclSuccess, "%s: ncclAllReduce returned %d: %s", what, (int)ret, ncclGetLastError(comm));
  if (ret == ncclSuccess) {
    for (j = 0; j < C && bad < 0; ++j)
      if (r[j] != nranks * (nranks + 1) / 2 + nranks * j) bad = j;
    EXPECT(bad < 0, "%s: AllReduce element %d is %d, want %d", what, bad, bad < 0 ? 0 : r[bad],
           nranks * (nranks + 1) / 2 + nranks * bad);
  }
  bufFree(s);
  bufFree(r);
}
