/* nccl_app's sections on the job's communicator (nccl_app.c describes them): every collective
 * against the reference, PreMulSum, point to point, groups, bad input, registration. */
#include "nccl_app_common.h"

/* ---- the collectives ------------------------------------------------------------------------ */

static const char* const kindName[NKINDS] = {"ncclAllReduce", "ncclReduce",  "ncclReduceScatter",
                                             "ncclBroadcast", "ncclBcast",   "ncclAllGather",
                                             "ncclAlltoAll",  "ncclGather",  "ncclScatter"};
static int reduces(Kind k) { return k == K_ALLREDUCE || k == K_REDUCE || k == K_REDUCESCATTER; }

/* One call of kind k on comm (g_comm's buffers), in place or not, checked against the reference. */
void runCase(Kind k, ncclDataType_t t, ncclRedOp_t op, size_t count, int root, int inPlace) {
  const int n = g_n, me = g_rank, red = reduces(k);
  const size_t e = sizeOf(t), c = count, blk = count * e, all = count * e * (size_t)n;
  unsigned char *send = g_send, *recv = g_recv;
  const void* sendArg = send;
  void* recvArg = recv;
  size_t sendBytes = 0, resultOff = 0, resultBytes = 0, guardEnd, j;
  int checkResult = 1, i;
  char what[160];
  ncclResult_t ret = ncclInternalError;

  snprintf(what, sizeof what, "%s %s %s count %zu root %d %s", kindName[k], typeName(t), red ? opName(op) : "-", c,
           root, inPlace ? "in place" : "out of place");
  if (all * 1 + GUARD > g_cap) abort();
  memset(g_want, SENTINEL, all + GUARD);
  memset(recv, SENTINEL, all + GUARD);
  memset(send, SENTINEL, all + GUARD);

  /* This rank's send buffer (its contents are also kept in g_input) and the expected result. */
  switch (k) {
    case K_ALLREDUCE:
    case K_REDUCE:
      fillInput(red, t, op, me, 0, c, g_input);
      sendBytes = blk;
      if (inPlace) {
        memcpy(recv, g_input, blk);
        sendArg = recv;
      }
      for (j = 0; j < c; ++j) put(t, g_want, j, reduceRef(t, op, j));
      resultBytes = blk;
      checkResult = k == K_ALLREDUCE || me == root;
      break;
    case K_REDUCESCATTER:
      fillInput(red, t, op, me, 0, c * (size_t)n, g_input);
      sendBytes = all;
      if (inPlace) {
        memcpy(recv, g_input, all);
        sendArg = recv;
        recvArg = recv + (size_t)me * blk;
        resultOff = (size_t)me * blk;
      }
      for (j = 0; j < c; ++j) put(t, g_want + resultOff, j, reduceRef(t, op, (size_t)me * c + j));
      resultBytes = blk;
      break;
    case K_BROADCAST:
    case K_BCAST:
      fillInput(0, t, op, me, 0, c, g_input);
      sendBytes = blk;
      if (inPlace || k == K_BCAST) {
        memcpy(recv, g_input, blk);
        sendArg = recv;
      }
      fillInput(0, t, op, root, 0, c, g_want);
      resultBytes = blk;
      break;
    case K_ALLGATHER:
      fillInput(0, t, op, me, 0, c, g_input);
      sendBytes = blk;
      if (inPlace) {
        memcpy(recv + (size_t)me * blk, g_input, blk);
        sendArg = recv + (size_t)me * blk;
      }
      for (i = 0; i < n; ++i) fillInput(0, t, op, i, 0, c, g_want + (size_t)i * blk);
      resultBytes = all;
      break;
    case K_ALLTOALL:
      fillInput(0, t, op, me, 0, c * (size_t)n, g_input);
      sendBytes = all;
      if (inPlace) {
        memcpy(recv, g_input, all);
        sendArg = recv;
      }
      /* Block i comes from rank i: its send block me. */
      for (i = 0; i < n; ++i) fillInput(0, t, op, i, (size_t)me * c, c, g_want + (size_t)i * blk);
      resultBytes = all;
      break;
    case K_GATHER:
      fillInput(0, t, op, me, 0, c, g_input);
      sendBytes = blk;
      if (me == root) {
        if (inPlace) {
          memcpy(recv + (size_t)root * blk, g_input, blk);
          sendArg = recv + (size_t)root * blk;
        }
        for (i = 0; i < n; ++i) fillInput(0, t, op, i, 0, c, g_want + (size_t)i * blk);
        resultBytes = all;
      } else {
        checkResult = 0;
        if (inPlace) recvArg = NULL; /* unused off the root: NULL is fine */
      }
      break;
    case K_SCATTER:
      fillInput(0, t, op, me, 0, c * (size_t)n, g_input);
      if (me == root) {
        sendBytes = all;
        if (inPlace) {
          memcpy(recv, g_input, all);
          sendArg = recv;
          recvArg = recv + (size_t)root * blk;
          resultOff = (size_t)root * blk;
        }
      } else {
        sendBytes = all;
        if (inPlace) sendArg = NULL; /* unused off the root */
      }
      fillInput(0, t, op, root, (size_t)me * c, c, g_want + resultOff);
      resultBytes = blk;
      break;
    default:
      abort();
  }
  if (sendArg == send && k != K_BCAST) memcpy(send, g_input, sendBytes); /* out of place (off the root too) */

  switch (k) {
    case K_ALLREDUCE: ret = ncclAllReduce(sendArg, recvArg, c, t, op, g_comm, NULL); break;
    case K_REDUCE: ret = ncclReduce(sendArg, recvArg, c, t, op, root, g_comm, NULL); break;
    case K_REDUCESCATTER: ret = ncclReduceScatter(sendArg, recvArg, c, t, op, g_comm, NULL); break;
    case K_BROADCAST: ret = ncclBroadcast(sendArg, recvArg, c, t, root, g_comm, NULL); break;
    case K_BCAST: ret = ncclBcast(recv, c, t, root, g_comm, NULL); break;
    case K_ALLGATHER: ret = ncclAllGather(sendArg, recvArg, c, t, g_comm, NULL); break;
    case K_ALLTOALL: ret = ncclAlltoAll(sendArg, recvArg, c, t, g_comm, NULL); break;
    case K_GATHER: ret = ncclGather(sendArg, recvArg, c, t, root, g_comm, NULL); break;
    case K_SCATTER: ret = ncclScatter(sendArg, recvArg, c, t, root, g_comm, NULL); break;
    default: abort();
  }
  EXPECT(ret == ncclSuccess, "%s returned %d: %s", what, (int)ret, ncclGetLastError(g_comm));
  if (ret != ncclSuccess) return;

  if (checkResult) {
    /* In place, only the result's own part is checked (plus the guard after the whole buffer). */
    guardEnd = inPlace && (k == K_REDUCESCATTER || (k == K_SCATTER && me == root)) ? all : resultOff + resultBytes;
    expectEqual(recv + resultOff, g_want + resultOff, resultBytes, e, what);
    expectUntouched(recv + guardEnd, GUARD, what);
  } else if (!inPlace) {
    /* Reduce and Gather off the root: recvbuff is not used. */
    expectUntouched(recv, (k == K_GATHER ? all : blk) + GUARD, what);
  }
  /* Out of place, sendbuff is left as it was. */
  if (sendArg == send && k != K_BCAST) {
    EXPECT(memcmp(send, g_input, sendBytes) == 0, "%s: sendbuff changed", what);
  }
}

static int g_call; /* the number of calls made: picks each call's root, the same on every rank */
static int nextRoot(void) { return (g_n - 1 + g_call++) % g_n; }

void collectives(void) {
  static const size_t counts[] = {COUNT, 1, 0};
  int ki, ti, oi, ci, ip;
  g_sect = S_COLL;
  for (ki = 0; ki < NKINDS; ++ki)
    for (ti = 0; ti < NTYPES; ++ti)
      for (ci = 0; ci < 3; ++ci)
        for (ip = 0; ip < 2; ++ip) {
          if (ki == K_BCAST && !ip) continue; /* in place only */
          if (reduces((Kind)ki)) {
            for (oi = 0; oi < NOPS; ++oi) runCase((Kind)ki, allTypes[ti], allOps[oi], counts[ci], nextRoot(), ip);
          } else {
            runCase((Kind)ki, allTypes[ti], ncclSum, counts[ci], nextRoot(), ip);
          }
        }
  /* One larger call of each, so that pipelined and chunked paths are exact too. */
  for (ki = 0; ki < NKINDS; ++ki)
    for (ip = 0; ip < 2; ++ip) {
      if (ki == K_BCAST && !ip) continue;
      runCase((Kind)ki, ncclFloat32, ncclSum, BIG_COUNT, nextRoot(), ip);
    }
  runCase(K_ALLREDUCE, ncclBfloat16, ncclMax, BIG_COUNT, 0, 0);
  runCase(K_ALLREDUCE, ncclFloat8e4m3, ncclSum, BIG_COUNT, 0, 1);
}

/* ---- PreMulSum --------------------------------------------------------------------------------- */

void premulSum(void) {
  const int me = g_rank;
  ncclRedOp_t op = ncclSum;
  float fscalar = 0.5f * (float)(me + 1); /* 0.5, 1, 1.5, ...: products of small integers stay exact */
  int32_t iscalar = me - 1;               /* -1, 0, 1, ...: rank 0 negates, rank 1 zeroes */
  uint16_t hscalar = (uint16_t)encodeInt(me + 1, 5, 10);
  double dscalar = me == 0 ? -2.0 : 0.25 * me; /* no zero: 0 * -3 would be -0, and -0 + -0 too */
  int r, ip, ret;
  float x[4] = {1, 2, 3, 4};
  g_sect = S_PREMUL;

  /* float32, with a scalar of its own on every rank. */
  OK(ncclRedOpCreatePreMulSum(&op, &fscalar, ncclFloat32, ncclScalarHostImmediate, g_comm), g_comm);
  EXPECT((int)op >= (int)ncclNumOps, "a created op is %d, one of the built-in ones", (int)op);
  g_premul = 1;
  for (r = 0; r < g_n; ++r) g_scalar[r] = 0.5 * (r + 1);
  for (ip = 0; ip < 2; ++ip) {
    runCase(K_ALLREDUCE, ncclFloat32, op, COUNT, 0, ip);
    runCase(K_REDUCE, ncclFloat32, op, COUNT, nextRoot(), ip);
    runCase(K_REDUCESCATTER, ncclFloat32, op, COUNT, 0, ip);
  }
  runCase(K_ALLREDUCE, ncclFloat32, op, 1, 0, 0);
  g_premul = 0;
  /* The op is float32's: another type is refused, and the communicator goes on. */
  ret = ncclAllReduce(x, x, 4, ncclInt32, op, g_comm, NULL);
  EXPECT(ret == ncclInvalidArgument, "a float32 PreMulSum op used for int32 returned %d", ret);
  OK(ncclRedOpDestroy(op, g_comm), g_comm);
  ret = ncclAllReduce(x, x, 4, ncclFloat32, op, g_comm, NULL);
  EXPECT(ret == ncclInvalidArgument, "a destroyed op returned %d", ret);
  EXPECT(strlen(ncclGetLastError(g_comm)) > 0, "no last-error text for a destroyed op");
  ret = ncclRedOpDestroy(op, g_comm);
  EXPECT(ret == ncclInvalidArgument, "destroying an op twice returned %d", ret);
  ret = ncclRedOpDestroy(ncclSum, g_comm);
  EXPECT(ret == ncclInvalidArgument, "destroying ncclSum returned %d", ret);

  /* int32 (wrapping integer arithmetic; here no wrap), half and double. */
  OK(ncclRedOpCreatePreMulSum(&op, &iscalar, ncclInt32, ncclScalarHostImmediate, g_comm), g_comm);
  g_premul = 1;
  for (r = 0; r < g_n; ++r) g_scalar[r] = r - 1;
  runCase(K_ALLREDUCE, ncclInt32, op, COUNT, 0, 0);
  runCase(K_REDUCESCATTER, ncclInt32, op, COUNT, 0, 1);
  g_premul = 0;
  OK(ncclRedOpDestroy(op, g_comm), g_comm);

  OK(ncclRedOpCreatePreMulSum(&op, &hscalar, ncclFloat16, ncclScalarHostImmediate, g_comm), g_comm);
  g_premul = 1;
  for (r = 0; r < g_n; ++r) g_scalar[r] = r + 1;
  runCase(K_ALLREDUCE, ncclFloat16, op, COUNT, 0, 1);
  runCase(K_REDUCE, ncclFloat16, op, COUNT, nextRoot(), 0);
  g_premul = 0;
  OK(ncclRedOpDestroy(op, g_comm), g_comm);

  /* ncclScalarDevice: the scalar stays in memory (device memory in device mode, from
   * ncclMemAlloc; host memory otherwise) and is read as each call runs, so a new value between two
   * calls of one op changes the second result. */
  {
    float* at = (float*)bufAlloc(sizeof(float)); /* device mode: the emulated GPU's host-visible memory */
    *at = 0.5f * (float)(me + 1);
    OK(ncclRedOpCreatePreMulSum(&op, at, ncclFloat32, ncclScalarDevice, g_comm), g_comm);
    g_premul = 1;
    for (r = 0; r < g_n; ++r) g_scalar[r] = 0.5 * (r + 1);
    runCase(K_ALLREDUCE, ncclFloat32, op, COUNT, 0, 0);
    *at = (float)(me + 2);
    for (r = 0; r < g_n; ++r) g_scalar[r] = r + 2;
    runCase(K_ALLREDUCE, ncclFloat32, op, COUNT, 0, 1);
    runCase(K_REDUCESCATTER, ncclFloat32, op, COUNT, 0, 0);
    g_premul = 0;
    OK(ncclRedOpDestroy(op, g_comm), g_comm);
    bufFree(at);
    ret = ncclRedOpCreatePreMulSum(&op, &fscalar, ncclFloat32, (ncclScalarResidence_t)7, g_comm);
    EXPECT(ret == ncclInvalidArgument, "a residence of 7 returned %d", ret);
  }

  /* Two ops alive at once, each with its own scalar. */
  {
    ncclRedOp_t a = ncclSum, b = ncclSum;
    OK(ncclRedOpCreatePreMulSum(&a, &dscalar, ncclFloat64, ncclScalarHostImmediate, g_comm), g_comm);
    OK(ncclRedOpCreatePreMulSum(&b, &fscalar, ncclFloat32, ncclScalarHostImmediate, g_comm), g_comm);
    EXPECT(a != b, "two live ops share the value %d", (int)a);
    g_premul = 1;
    for (r = 0; r < g_n; ++r) g_scalar[r] = r == 0 ? -2.0 : 0.25 * r;
    runCase(K_ALLREDUCE, ncclFloat64, a, COUNT, 0, 0);
    for (r = 0; r < g_n; ++r) g_scalar[r] = 0.5 * (r + 1);
    runCase(K_ALLREDUCE, ncclFloat32, b, COUNT, 0, 0);
    g_premul = 0;
    OK(ncclRedOpDestroy(a, g_comm), g_comm);
    OK(ncclRedOpDestroy(b, g_comm), g_comm);
  }
}

/* ---- point to point -------------------------------------------------------------------------- */

void p2p(void) {
  static const ncclDataType_t types[] = {ncclInt8, ncclFloat64, ncclBfloat16, ncclFloat8e5m2};
  static const size_t counts[] = {COUNT, 1, 0, BIG_COUNT};
  const int n = g_n, me = g_rank;
  const int next = (me + 1) % n, prev = (me + n - 1) % n;
  int ti, ci, grouped;
  char what[128];
  g_sect = S_P2P;
  for (ti = 0; ti < 4; ++ti)
    for (ci = 0; ci < 4; ++ci) {
      const ncclDataType_t t = types[ti];
      const size_t c = counts[ci], bytes = c * sizeOf(t);
      int partner = me ^ 1;
      if (ci == 3 && ti != 0) continue;
      /* A ring: send to the next rank, receive from the previous, in one group. */
      snprintf(what, sizeof what, "ring of ncclSend/ncclRecv %s count %zu", typeName(t), c);
      memset(g_recv, SENTINEL, bytes + GUARD);
      fillInput(0, t, ncclSum, me, 0, c, g_send);
      fillInput(0, t, ncclSum, prev, 0, c, g_want);
      OK(ncclGroupStart(), NULL);
      OK(ncclSend(g_send, c, t, next, g_comm, NULL), g_comm);
      OK(ncclRecv(g_recv, c, t, prev, g_comm, NULL), g_comm);
      OK(ncclGroupEnd(), g_comm);
      expectBytes(g_recv, g_want, bytes, sizeOf(t), what);

      /* Pairs (0,1), (2,3), ...: an odd rank out exchanges with itself (in a group). Grouped,
       * then ungrouped (the lower rank sends first, the higher receives first). */
      if (partner >= n) partner = me;
      for (grouped = 1; grouped >= 0; --grouped) {
        if (!grouped && partner == me) continue;
        snprintf(what, sizeof what, "%s pair exchange %d<->%d %s count %zu", grouped ? "grouped" : "ungrouped", me,
                 partner, typeName(t), c);
        memset(g_recv, SENTINEL, bytes + GUARD);
        fillInput(0, t, ncclSum, partner, 0, c, g_want);
        if (grouped) {
          OK(ncclGroupStart(), NULL);
          OK(ncclRecv(g_recv, c, t, partner, g_comm, NULL), g_comm);
          OK(ncclSend(g_send, c, t, partner, g_comm, NULL), g_comm);
          OK(ncclGroupEnd(), g_comm);
        } else if (me < partner) {
          OK(ncclSend(g_send, c, t, partner, g_comm, NULL), g_comm);
          OK(ncclRecv(g_recv, c, t, partner, g_comm, NULL), g_comm);
        } else {
          OK(ncclRecv(g_recv, c, t, partner, g_comm, NULL), g_comm);
          OK(ncclSend(g_send, c, t, partner, g_comm, NULL), g_comm);
        }
        expectBytes(g_recv, g_want, bytes, sizeOf(t), what);
      }
    }
}

/* ---- groups ---------------------------------------------------------------------------------- */

void groups(void) {
  const int n = g_n, me = g_rank;
  const size_t c = COUNT;
  enum { NB = 5 };
  unsigned char *s[NB], *r[NB], *want;
  size_t j, bytes = c * 8 * (size_t)n + GUARD;
  int b, root = n - 1;
  ncclSimInfo_t sim = NCCL_SIM_INFO_INITIALIZER;
  g_sect = S_GROUP;
  want = malloc(bytes);
  for (b = 0; b < NB; ++b) {
    s[b] = bufAlloc(bytes);
    r[b] = bufAlloc(bytes);
    memset(r[b], SENTINEL, bytes);
  }
  /* AllReduce int32 max, Broadcast float64 from the last rank, AllGather bf16, ReduceScatter
   * fp8 e4m3 sum, a ring of int8 sends: five calls, one ncclGroupEnd (nested groups too). */
  fillInput(1, ncclInt32, ncclMax, me, 0, c, s[0]);
  fillInput(0, ncclFloat64, ncclSum, me, 0, c, s[1]);
  fillInput(0, ncclBfloat16, ncclSum, me, 0, c, s[2]);
  fillInput(1, ncclFloat8e4m3, ncclSum, me, 0, c * (size_t)n, s[3]);
  fillInput(0, ncclInt8, ncclSum, me, 0, c, s[4]);
  OK(ncclGroupStart(), NULL);
  OK(ncclAllReduce(s[0], r[0], c, ncclInt32, ncclMax, g_comm, NULL), g_comm);
  OK(ncclBroadcast(s[1], r[1], c, ncclFloat64, root, g_comm, NULL), g_comm);
  OK(ncclGroupStart(), NULL);
  OK(ncclAllGather(s[2], r[2], c, ncclBfloat16, g_comm, NULL), g_comm);
  OK(ncclReduceScatter(s[3], r[3], c, ncclFloat8e4m3, ncclSum, g_comm, NULL), g_comm);
  OK(ncclGroupEnd(), g_comm);
  OK(ncclSend(s[4], c, ncclInt8, (me + 1) % n, g_comm, NULL), g_comm);
  OK(ncclRecv(r[4], c, ncclInt8, (me + n - 1) % n, g_comm, NULL), g_comm);
  OK(ncclGroupEnd(), g_comm);

  memset(want, SENTINEL, bytes);
  for (j = 0; j < c; ++j) put(ncclInt32, want, j, reduceRef(ncclInt32, ncclMax, j));
  expectBytes(r[0], want, c * 4, 4, "grouped ncclAllReduce int32 max");
  fillInput(0, ncclFloat64, ncclSum, root, 0, c, want);
  expectBytes(r[1], want, c * 8, 8, "grouped ncclBroadcast float64");
  for (b = 0; b < n; ++b) fillInput(0, ncclBfloat16, ncclSum, b, 0, c, want + (size_t)b * c * 2);
  expectBytes(r[2], want, c * 2 * (size_t)n, 2, "grouped ncclAllGather bfloat16");
  memset(want, SENTINEL, bytes);
  for (j = 0; j < c; ++j) put(ncclFloat8e4m3, want, j, reduceRef(ncclFloat8e4m3, ncclSum, (size_t)me * c + j));
  expectBytes(r[3], want, c, 1, "grouped ncclReduceScatter fp8e4m3 sum");
  fillInput(0, ncclInt8, ncclSum, (me + n - 1) % n, 0, c, want);
  expectBytes(r[4], want, c, 1, "grouped ring of int8 sends");

  /* ncclGroupSimulateEnd: an estimate, and nothing runs (the receive buffers keep the sentinel). */
  for (b = 0; b < NB; ++b) memset(r[b], SENTINEL, bytes);
  OK(ncclGroupStart(), NULL);
  OK(ncclAllReduce(s[0], r[0], c, ncclInt32, ncclSum, g_comm, NULL), g_comm);
  OK(ncclAllGather(s[2], r[2], c, ncclBfloat16, g_comm, NULL), g_comm);
  OK(ncclBroadcast(s[1], r[1], c, ncclFloat64, 0, g_comm, NULL), g_comm);
  OK(ncclGroupSimulateEnd(&sim), g_comm);
  EXPECT(sim.estimatedTime > 0, "ncclGroupSimulateEnd's estimatedTime is %g", (double)sim.estimatedTime);
  for (b = 0; b < 3; ++b) expectUntouched(r[b], bytes, "a call of a simulated group");
  /* The communicator goes on, in step on every rank. */
  memset(r[0], SENTINEL, bytes);
  OK(ncclAllReduce(s[0], r[0], c, ncclInt32, ncclMax, g_comm, NULL), g_comm);
  memset(want, SENTINEL, bytes);
  for (j = 0; j < c; ++j) put(ncclInt32, want, j, reduceRef(ncclInt32, ncclMax, j));
  expectBytes(r[0], want, c * 4, 4, "ncclAllReduce after a simulated group");

  for (b = 0; b < NB; ++b) {
    bufFree(s[b]);
    bufFree(r[b]);
  }
  free(want);
}

/* ---- bad input ------------------------------------------------------------------------------ */

void badInput(void) {
  const int n = g_n;
  float* x = (float*)g_send;
  ncclResult_t r, state = ncclInternalError;
  int count = -1, rank = -1;
  const char* text;
  g_sect = S_BADINPUT;

  r = ncclAllReduce(x, x, 4, (ncclDataType_t)99, ncclSum, g_comm, NULL);
  text = ncclGetLastError(g_comm);
  EXPECT(r == ncclInvalidArgument, "datatype 99 returned %d", (int)r);
  EXPECT(text && strstr(text, "99") && strstr(text, "datatype"), "datatype 99's text is '%s'", text ? text : "(null)");
  EXPECT(text && strstr(text, "ncclAllReduce"), "the text names hora's function, not NCCL's: '%s'", text ? text : "");
  r = ncclAllReduce(x, x, 4, ncclFloat32, (ncclRedOp_t)42, g_comm, NULL);
  EXPECT(r == ncclInvalidArgument, "op 42 returned %d", (int)r);
  EXPECT(strlen(ncclGetLastError(g_comm)) > 0, "no text for op 42");
  r = ncclAllReduce(x, x, 4, ncclFloat32, (ncclRedOp_t)-1, g_comm, NULL);
  EXPECT(r == ncclInvalidArgument, "op -1 returned %d", (int)r);
  r = ncclBroadcast(x, x, 4, ncclFloat32, n, g_comm, NULL);
  EXPECT(r == ncclInvalidArgument, "root %d of %d ranks returned %d", n, n, (int)r);
  r = ncclReduce(x, x, 4, ncclFloat32, ncclSum, -1, g_comm, NULL);
  EXPECT(r == ncclInvalidArgument, "root -1 returned %d", (int)r);
  r = ncclGather(x, x, 1, ncclFloat32, n + 3, g_comm, NULL);
  EXPECT(r == ncclInvalidArgument, "a Gather to root %d returned %d", n + 3, (int)r);
  r = ncclAllReduce(NULL, x, 4, ncclFloat32, ncclSum, g_comm, NULL);
  EXPECT(r == ncclInvalidArgument, "a NULL sendbuff returned %d", (int)r);
  r = ncclAllReduce(x, NULL, 4, ncclFloat32, ncclSum, g_comm, NULL);
  EXPECT(r == ncclInvalidArgument, "a NULL recvbuff returned %d", (int)r);
  r = ncclAllGather(x, NULL, 4, ncclFloat32, g_comm, NULL);
  EXPECT(r == ncclInvalidArgument, "an AllGather into NULL returned %d", (int)r);
  r = ncclSend(x, 4, ncclFloat32, n, g_comm, NULL);
  EXPECT(r == ncclInvalidArgument, "a send to peer %d returned %d", n, (int)r);
  r = ncclAllReduce(x, x, 4, ncclFloat32, ncclSum, NULL, NULL);
  EXPECT(r == ncclInvalidArgument, "an AllReduce on a NULL comm returned %d", (int)r);
  r = ncclCommCount(NULL, &count);
  EXPECT(r == ncclInvalidArgument, "ncclCommCount(NULL) returned %d", (int)r);
  EXPECT(strlen(ncclGetLastError(NULL)) > 0, "no thread last-error text after ncclCommCount(NULL)");
  r = ncclCommUserRank(g_comm, NULL);
  EXPECT(r == ncclInvalidArgument, "ncclCommUserRank(comm, NULL) returned %d", (int)r);
  r = ncclCommGetAsyncError(g_comm, NULL);
  EXPECT(r == ncclInvalidArgument, "ncclCommGetAsyncError(comm, NULL) returned %d", (int)r);
  r = ncclGetVersion(NULL);
  EXPECT(r == ncclInvalidArgument, "ncclGetVersion(NULL) returned %d", (int)r);

  /* None of that harmed the communicator. */
  OK(ncclCommGetAsyncError(g_comm, &state), g_comm);
  EXPECT(state == ncclSuccess, "the communicator's state after bad arguments is %d", (int)state);
  OK(ncclCommCount(g_comm, &count), g_comm);
  OK(ncclCommUserRank(g_comm, &rank), g_comm);
  EXPECT(count == n && rank == g_rank, "count %d rank %d after bad arguments", count, rank);
  checkAllReduce(g_comm, n, g_rank, "after bad arguments");
  runCase(K_ALLREDUCE, ncclFloat16, ncclSum, COUNT, 0, 0);
}

/* ---- registration and windows -------------------------------------------------------------- */

void registration(void) {
  void *h = NULL, *h2 = NULL;
  int bogus = 0;
  ncclWindow_t win = NULL;
  const size_t bytes = COUNT * sizeof(float) * (size_t)g_n;
  ncclResult_t r;
  g_sect = S_REGISTER;

  OK(ncclCommRegister(g_comm, g_send, bytes, &h), g_comm);
  EXPECT(h != NULL, "ncclCommRegister gave a NULL handle");
  OK(ncclCommRegister(g_comm, g_recv, bytes, &h2), g_comm);
  EXPECT(h2 != NULL && h2 != h, "two registrations share the handle %p", h2);
  /* Calls on the registered buffers. */
  runCase(K_ALLREDUCE, ncclFloat32, ncclSum, COUNT, 0, 0);
  runCase(K_ALLGATHER, ncclFloat32, ncclSum, COUNT, 0, 0);
  OK(ncclCommDeregister(g_comm, h), g_comm);
  r = ncclCommDeregister(g_comm, h);
  EXPECT(r == ncclInvalidArgument, "deregistering a handle twice returned %d", (int)r);
  EXPECT(strlen(ncclGetLastError(g_comm)) > 0, "no text for a handle deregistered twice");
  r = ncclCommDeregister(g_comm, &bogus);
  EXPECT(r == ncclInvalidArgument, "deregistering a bogus handle returned %d", (int)r);
  OK(ncclCommDeregister(g_comm, h2), g_comm);

  /* A symmetric window, the same size on every rank, used by calls while it is registered. */
  OK(ncclCommWindowRegister(g_comm, g_recv, bytes, &win, NCCL_WIN_COLL_SYMMETRIC), g_comm);
  EXPECT(win != NULL, "ncclCommWindowRegister gave a NULL window");
  runCase(K_ALLREDUCE, ncclFloat32, ncclSum, COUNT, 0, 1);
  runCase(K_REDUCESCATTER, ncclFloat32, ncclAvg, COUNT, 0, 1);
  runCase(K_BROADCAST, ncclFloat32, ncclSum, COUNT, g_n - 1, 0);
  OK(ncclCommWindowDeregister(g_comm, win), g_comm);
  r = ncclCommWindowDeregister(g_comm, win);
  EXPECT(r == ncclInvalidArgument, "deregistering a window twice returned %d", (int)r);
  checkAllReduce(g_comm, g_n, g_rank, "after windows");
}

