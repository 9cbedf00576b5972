/* An application written only against hora.h, in C99, linked against libhora.so: it forks
 * ranks that share one unique id, checks every collective x dtype x op for exact results,
 * checks that bad arguments return errors, and that a rank leaving without a word becomes an
 * error (not a hang) on the others. Exit status 0 means every check passed. */
#define _POSIX_C_SOURCE 200809L
#include <hora.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define NRANKS 4
#define COUNT 1031

static int failures = 0;
#define EXPECT(cond, ...)                    \
  do {                                       \
    if (!(cond)) {                           \
      fprintf(stderr, "rank %d: ", g_rank);  \
      fprintf(stderr, __VA_ARGS__);          \
      fprintf(stderr, "\n");                 \
      ++failures;                            \
    }                                        \
  } while (0)
static int g_rank = -1;

/* Small integers in every type; half and bfloat16 encode them exactly. */
static uint16_t halfOf(int v) {
  if (v == 0) return 0;
  uint16_t sign = v < 0 ? 0x8000 : 0;
  unsigned m = (unsigned)(v < 0 ? -v : v);
  int e = 0;
  while ((m >> e) > 1) ++e;
  return (uint16_t)(sign | (uint16_t)((e + 15) << 10) | (uint16_t)(((m << 10) >> e) & 0x3ff));
}
static uint16_t bf16Of(int v) {
  float f = (float)v;
  uint32_t b;
  memcpy(&b, &f, 4);
  return (uint16_t)(b >> 16);
}

static size_t sizeOf(horaDataType_t t) {
  switch (t) {
    case horaInt8: case horaUint8: return 1;
    case horaFloat16: case horaBfloat16: return 2;
    case horaInt32: case horaUint32: case horaFloat32: return 4;
    default: return 8;
  }
}

static void put(horaDataType_t t, void* b, size_t i, long v) {
  switch (t) {
    case horaInt8: ((int8_t*)b)[i] = (int8_t)v; break;
    case horaUint8: ((uint8_t*)b)[i] = (uint8_t)v; break;
    case horaInt32: ((int32_t*)b)[i] = (int32_t)v; break;
    case horaUint32: ((uint32_t*)b)[i] = (uint32_t)v; break;
    case horaInt64: ((int64_t*)b)[i] = (int64_t)v; break;
    case horaUint64: ((uint64_t*)b)[i] = (uint64_t)v; break;
    case horaFloat16: ((uint16_t*)b)[i] = halfOf((int)v); break;
    case horaBfloat16: ((uint16_t*)b)[i] = bf16Of((int)v); break;
    case horaFloat32: ((float*)b)[i] = (float)v; break;
    case horaFloat64: ((double*)b)[i] = (double)v; break;
    default: break;
  }
}

/* Rank r's element i: 1..3 (so sums, products of 4 ranks and maxima stay exact everywhere). */
static long input(int r, size_t i) { return (long)((r + i + i / 7) % 3) + 1; }

static long reduceRef(horaRedOp_t op, size_t i) {
  long acc = input(0, i);
  for (int r = 1; r < NRANKS; ++r) {
    long x = input(r, i);
    if (op == horaProd) acc *= x;
    else if (op == horaMax) acc = x > acc ? x : acc;
    else if (op == horaMin) acc = x < acc ? x : acc;
    else acc += x;
  }
  return op == horaAvg ? acc / NRANKS : acc;
}

static int same(horaDataType_t t, const void* got, size_t i, long want) {
  unsigned char w[8];
  put(t, w, 0, want);
  return memcmp((const unsigned char*)got + i * sizeOf(t), w, sizeOf(t)) == 0;
}

static void collectives(horaComm_t comm, int rank) {
  static const horaDataType_t types[] = {horaInt8, horaUint8, horaInt32, horaUint32, horaInt64,
                                         horaUint64, horaFloat16, horaFloat32, horaFloat64, horaBfloat16};
  static const horaRedOp_t ops[] = {horaSum, horaProd, horaMax, horaMin, horaAvg};
  for (size_t ti = 0; ti < sizeof types / sizeof *types; ++ti) {
    horaDataType_t t = types[ti];
    size_t e = sizeOf(t);
    unsigned char* in = malloc(COUNT * NRANKS * e);
    unsigned char* out = malloc(COUNT * NRANKS * e);
    for (size_t oi = 0; oi < sizeof ops / sizeof *ops; ++oi) {
      horaRedOp_t op = ops[oi];
      /* Avg of floats divides exactly only for some sums: keep it to the integer types. */
      if (op == horaAvg && (t == horaFloat16 || t == horaBfloat16 || t == horaFloat32 || t == horaFloat64)) continue;
      for (size_t i = 0; i < COUNT; ++i) put(t, in, i, input(rank, i));
      EXPECT(horaAllReduce(in, out, COUNT, t, op, comm, NULL) == horaSuccess, "allreduce: %s", horaGetLastError(comm));
      for (size_t i = 0; i < COUNT; ++i) EXPECT(same(t, out, i, reduceRef(op, i)), "allreduce t=%d op=%d i=%zu", t, op, i);
      EXPECT(horaReduce(in, out, COUNT, t, op, 1, comm, NULL) == horaSuccess, "reduce: %s", horaGetLastError(comm));
      if (rank == 1)
        for (size_t i = 0; i < COUNT; ++i) EXPECT(same(t, out, i, reduceRef(op, i)), "reduce t=%d op=%d i=%zu", t, op, i);
      for (int r = 0; r < NRANKS; ++r)
        for (size_t i = 0; i < COUNT; ++i) put(t, in, (size_t)r * COUNT + i, input(rank, (size_t)r * COUNT + i));
      EXPECT(horaReduceScatter(in, out, COUNT, t, op, comm, NULL) == horaSuccess, "reducescatter: %s", horaGetLastError(comm));
      for (size_t i = 0; i < COUNT; ++i)
        EXPECT(same(t, out, i, reduceRef(op, (size_t)rank * COUNT + i)), "reducescatter t=%d op=%d i=%zu", t, op, i);
    }
    for (size_t i = 0; i < COUNT; ++i) put(t, in, i, input(rank, i));
    EXPECT(horaAllGather(in, out, COUNT, t, comm, NULL) == horaSuccess, "allgather: %s", horaGetLastError(comm));
    for (int r = 0; r < NRANKS; ++r)
      for (size_t i = 0; i < COUNT; ++i) EXPECT(same(t, out, (size_t)r * COUNT + i, input(r, i)), "allgather t=%d", t);
    if (rank == 2)
      for (size_t i = 0; i < COUNT; ++i) put(t, out, i, input(2, i));
    EXPECT(horaBroadcast(out, out, COUNT, t, 2, comm, NULL) == horaSuccess, "broadcast: %s", horaGetLastError(comm));
    for (size_t i = 0; i < COUNT; ++i) EXPECT(same(t, out, i, input(2, i)), "broadcast t=%d", t);
    free(in);
    free(out);
  }
  /* A ring of sends and receives in a group. */
  int32_t mine = rank, theirs = -1;
  horaGroupStart();
  horaSend(&mine, 1, horaInt32, (rank + 1) % NRANKS, comm, NULL);
  horaRecv(&theirs, 1, horaInt32, (rank + NRANKS - 1) % NRANKS, comm, NULL);
  EXPECT(horaGroupEnd() == horaSuccess, "group: %s", horaGetLastError(comm));
  EXPECT(theirs == (rank + NRANKS - 1) % NRANKS, "ring of sends");
}

static void badArguments(horaComm_t comm) {
  float x[4] = {0};
  EXPECT(horaAllReduce(x, x, 4, horaFloat, horaSum, NULL, NULL) == horaInvalidArgument, "null comm");
  EXPECT(horaAllReduce(x, x, 4, (horaDataType_t)42, horaSum, comm, NULL) == horaInvalidArgument, "bad dtype");
  EXPECT(horaAllReduce(x, x, 4, horaFloat, (horaRedOp_t)42, comm, NULL) == horaInvalidArgument, "bad op");
  EXPECT(horaBroadcast(x, x, 4, horaFloat, NRANKS, comm, NULL) == horaInvalidArgument, "bad root");
  EXPECT(horaAllReduce(NULL, x, 4, horaFloat, horaSum, comm, NULL) == horaInvalidArgument, "null buffer");
  EXPECT(strlen(horaGetLastError(comm)) > 0, "no error text");
  horaResult_t async = horaInternalError;
  EXPECT(horaCommGetAsyncError(comm, &async) == horaSuccess && async == horaSuccess, "comm unusable after bad args");
}

static int rankMain(horaUniqueId id, int rank) {
  g_rank = rank;
  horaComm_t comm;
  if (horaCommInitRank(&comm, NRANKS, id, rank) != horaSuccess) {
    fprintf(stderr, "rank %d: init: %s\n", rank, horaGetLastError(NULL));
    return 1;
  }
  collectives(comm, rank);
  badArguments(comm);
  collectives(comm, rank); /* still exact after the bad calls */
  /* Rank 3 leaves without a word; everyone else must get an error, not a hang. */
  if (rank == 3) _exit(failures ? 1 : 0);
  float big[1 << 16];
  memset(big, 0, sizeof big);
  horaResult_t r = horaSuccess;
  for (int i = 0; i < 1000 && r == horaSuccess; ++i) r = horaAllReduce(big, big, 1 << 16, horaFloat, horaSum, comm, NULL);
  EXPECT(r == horaRemoteError, "a vanished peer gave %s: %s", horaGetErrorString(r), horaGetLastError(comm));
  horaCommAbort(comm);
  return failures ? 1 : 0;
}

int main(void) {
  horaUniqueId id;
  int version = 0;
  if (horaGetVersion(&version) != horaSuccess || version != HORA_VERSION_CODE) return 2;
  /* The ranks are forked first and given the id through a pipe once it exists, as a launcher
   * hands it over: no fork happens while the rendezvous's thread runs in this process (a child
   * forked while another thread holds an allocator lock may never get it). */
  pid_t pids[NRANKS];
  int pipes[NRANKS][2];
  for (int r = 0; r < NRANKS; ++r) {
    if (pipe(pipes[r]) != 0) return 2;
    pids[r] = fork();
    if (pids[r] == 0) {
      alarm(240); /* a hang kills the rank, which fails the test */
      size_t got = 0;
      while (got < sizeof id) {
        ssize_t k = read(pipes[r][0], (char*)&id + got, sizeof id - got);
        if (k <= 0) _exit(3);
        got += (size_t)k;
      }
      _exit(rankMain(id, r));
    }
    close(pipes[r][0]);
  }
  if (horaGetUniqueId(&id) != horaSuccess) {
    fprintf(stderr, "horaGetUniqueId: %s\n", horaGetLastError(NULL));
    return 2;
  }
  for (int r = 0; r < NRANKS; ++r) {
    if (write(pipes[r][1], &id, sizeof id) != (ssize_t)sizeof id) return 2;
    close(pipes[r][1]);
  }
  int bad = 0;
  for (int r = 0; r < NRANKS; ++r) {
    int st = 0;
    waitpid(pids[r], &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
      fprintf(stderr, "rank %d failed (status 0x%x)\n", r, st);
      bad = 1;
    }
  }
  if (!bad) printf("abi_app: every check passed on %d ranks\n", NRANKS);
  return bad;
}
