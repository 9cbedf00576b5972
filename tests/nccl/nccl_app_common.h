/* nccl_app's shared part (nccl_app.c describes the program): the job's constants and state, the
 * checks and their tally, the data types and their encodings, inputs and references, and the
 * sections. Its files:
 *   nccl_app.c              main: the ranks' fork, basics, the summary
 *   nccl_app_common.c       the job's buffers, typed encoders, references, check helpers
 *   nccl_app_collectives.c  collectives, premulsum, p2p, groups, badinput, register
 *   nccl_app_lifecycle.c    split, nonblocking, scalable, shrink, fault, initall
 */
#ifndef NCCL_APP_COMMON_H
#define NCCL_APP_COMMON_H

#define _DEFAULT_SOURCE
#define _POSIX_C_SOURCE 200809L
#include <nccl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAX_RANKS 8
#define COUNT 1031         /* the sweep's count: odd, prime, not a multiple of any vector width */
#define BIG_COUNT 262147   /* one larger call per collective (float32), so chunked paths run too */
#define GUARD 64           /* bytes after every result that must stay untouched */
#define SENTINEL 0xA5
#define CHILD_ALARM_S 120
#define VICTIM 1           /* the rank the fault section kills */

/* ---- checks, counted per process and section in memory shared with the parent ---------------- */

enum {
  S_BASICS, S_COLL, S_PREMUL, S_P2P, S_GROUP, S_BADINPUT, S_REGISTER, S_SPLIT, S_NONBLOCK, S_SCALABLE,
  S_SHRINK, S_FAULT, S_INITALL, NSECT
};
extern const char* const sectName[NSECT];

typedef struct {
  int checks[MAX_RANKS + 1][NSECT];
  int fails[MAX_RANKS + 1][NSECT];
} Tally;

extern Tally* g_tally;
extern int g_slot;    /* this process's row: its rank, or MAX_RANKS for the initall process */
extern int g_sect;    /* the section now running */
extern int g_rank;    /* for messages (-1 outside a rank) */
extern int g_printed;

/* The source file of a check, for its message: the line alone no longer says where it is. */
#define NCCL_APP_FILE (strrchr(__FILE__, '/') ? strrchr(__FILE__, '/') + 1 : __FILE__)

#define EXPECT(cond, ...)                                                                  \
  do {                                                                                     \
    g_tally->checks[g_slot][g_sect]++;                                                     \
    if (!(cond)) {                                                                         \
      g_tally->fails[g_slot][g_sect]++;                                                    \
      if (g_printed++ < 40) {                                                              \
        fprintf(stderr, "nccl_app rank %d [%s] %s:%d: ", g_rank, sectName[g_sect], NCCL_APP_FILE, __LINE__); \
        fprintf(stderr, __VA_ARGS__);                                                      \
        fprintf(stderr, "\n");                                                             \
      }                                                                                    \
    }                                                                                      \
  } while (0)

/* A call that must succeed: its code and, if not, the communicator's last-error text. */
#define OK(call, comm)                                                                     \
  do {                                                                                     \
    ncclResult_t r_ = (call);                                                              \
    EXPECT(r_ == ncclSuccess, "%s returned %d (%s): %s", #call, (int)r_, ncclGetErrorString(r_), \
           ncclGetLastError(comm));                                                        \
  } while (0)

/* ---- the job ------------------------------------------------------------------------------ */

extern int g_n;                 /* ranks */
extern int g_device;            /* buffers from ncclMemAlloc */
extern ncclComm_t g_comm;       /* the job's communicator */
extern size_t g_cap;            /* bytes of each of g_send, g_recv */
extern unsigned char* g_send;
extern unsigned char* g_recv;
extern unsigned char* g_want;   /* host memory: the expected result */
extern unsigned char* g_input;  /* host memory: this rank's input, to check sendbuff is left alone */

void* bufAlloc(size_t bytes);
void bufFree(void* p);
/* Waits for a non-blocking operation on comm (ret is what the call returned) and returns how it
 * ended. */
ncclResult_t settle(ncclComm_t comm, ncclResult_t ret);
/* An AllReduce (int32 sum of rank + 1 + j) on comm of nranks ranks, as rank `me` of it. */
void checkAllReduce(ncclComm_t comm, int nranks, int me, const char* what);

/* ---- data types and their encodings (nccl_app_common.c) ------------------------------------ */

extern const ncclDataType_t allTypes[];
extern const int nTypes;
#define NTYPES nTypes
extern const ncclRedOp_t allOps[];
extern const int nOps;
#define NOPS nOps

const char* typeName(ncclDataType_t t);
const char* opName(ncclRedOp_t op);
size_t sizeOf(ncclDataType_t t);
int isUnsigned(ncclDataType_t t);
int isFloating(ncclDataType_t t);
int isFp8(ncclDataType_t t);
/* An integer v in a binary floating format of ebits exponent and mbits mantissa bits. */
unsigned encodeInt(long v, int ebits, int mbits);
/* Stores the value v as element i of buffer b of type t. */
void put(ncclDataType_t t, void* b, size_t i, double v);

/* ---- inputs, references and checks (nccl_app_common.c) ------------------------------------- */

/* PreMulSum: the scalar of each rank (as a double) while such an op is in use; inputs are sum's. */
extern int g_premul;
extern double g_scalar[MAX_RANKS];

long valueOf(ncclDataType_t t, ncclRedOp_t op, int r, size_t j);
double reduceRef(ncclDataType_t t, ncclRedOp_t op, size_t j);
/* Fills elements [0, count) of dst with rank r's input elements [first, first + count). */
void fillInput(int reducing, ncclDataType_t t, ncclRedOp_t op, int r, size_t first, size_t count,
               unsigned char* dst);
/* Compares got with want (bytes bytes): one check. */
void expectEqual(const unsigned char* got, const unsigned char* want, size_t bytes, size_t elem, const char* what);
void expectUntouched(const unsigned char* got, size_t bytes, const char* what);
/* The result, and the GUARD bytes after it untouched. */
void expectBytes(const unsigned char* got, const unsigned char* want, size_t bytes, size_t elem, const char* what);

/* ---- the sections ----------------------------------------------------------------------------- */

typedef enum { K_ALLREDUCE, K_REDUCE, K_REDUCESCATTER, K_BROADCAST, K_BCAST, K_ALLGATHER, K_ALLTOALL, K_GATHER,
               K_SCATTER, NKINDS } Kind;
/* One call of kind k on comm (g_comm's buffers), in place or not, checked against the reference. */
void runCase(Kind k, ncclDataType_t t, ncclRedOp_t op, size_t count, int root, int inPlace);

/* nccl_app_collectives.c */
void collectives(void);
void premulSum(void);
void p2p(void);
void groups(void);
void badInput(void);
void registration(void);

/* nccl_app_lifecycle.c */
void split(void);
void nonblocking(void);
void scalable(void);
void shrinkHealthy(void);
void fault(void); /* the victim does not come back from it */
/* ncclCommInitAll in one process (its own): the process's exit status. */
int initAllMain(void);

#endif
