/* nccl_app's sections on communicators of their own (nccl_app.c describes them): split,
 * non-blocking communicators and configs, ncclCommInitRankScalable, shrink, a rank killed, and
 * ncclCommInitAll. */
#include "nccl_app_common.h"

/* ---- split ----------------------------------------------------------------------------------- */

void split(void) {
  const int n = g_n, me = g_rank, parity = me % 2;
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  ncclComm_t child = NULL, marker = (ncclComm_t)&cfg;
  int count = -1, rank = -1, want = 0, q, j;
  int32_t mine = me, got[MAX_RANKS];
  g_sect = S_SPLIT;

  /* Even and odd ranks, ordered by key n - rank: reversed. */
  cfg.commName = parity ? "odd" : "even";
  OK(ncclCommSplit(g_comm, parity, n - me, &child, &cfg), g_comm);
  EXPECT(child != NULL, "ncclCommSplit gave no communicator");
  if (child) {
    int members = 0;
    for (q = 0; q < n; ++q)
      if (q % 2 == parity) {
        ++members;
        if (q > me) ++want; /* reversed keys: the higher old ranks come first */
      }
    OK(ncclCommCount(child, &count), child);
    OK(ncclCommUserRank(child, &rank), child);
    EXPECT(count == members, "the %s child has %d ranks, want %d", cfg.commName, count, members);
    EXPECT(rank == want, "rank %d is rank %d of its child, want %d", me, rank, want);
    for (j = 0; j < MAX_RANKS; ++j) got[j] = -1;
    OK(ncclAllGather(&mine, got, 1, ncclInt32, child, NULL), child);
    for (j = 0; j < members; ++j) {
      int expect = -1, seen = 0;
      for (q = n - 1; q >= 0; --q)
        if (q % 2 == parity && seen++ == j) expect = q;
      EXPECT(got[j] == expect, "child rank %d is parent rank %d, want %d", j, got[j], expect);
    }
    checkAllReduce(child, members, want, "the even/odd child");
    OK(ncclCommDestroy(child), NULL);
  }

  /* The last rank passes NCCL_SPLIT_NOCOLOR and gets NULL; the others one communicator (config
   * NULL: the parent's). */
  child = marker;
  OK(ncclCommSplit(g_comm, me == n - 1 ? NCCL_SPLIT_NOCOLOR : 7, me, &child, NULL), g_comm);
  if (me == n - 1) {
    EXPECT(child == NULL, "NCCL_SPLIT_NOCOLOR gave %p, not NULL", (void*)child);
  } else {
    EXPECT(child != NULL && child != marker, "ncclCommSplit gave no communicator");
    if (child && child != marker) {
      ncclResult_t state = ncclInternalError;
      OK(ncclCommGetAsyncError(child, &state), child);
      EXPECT(state == ncclSuccess, "a child of a blocking communicator (config NULL) is in state %d", (int)state);
      OK(ncclCommCount(child, &count), child);
      OK(ncclCommUserRank(child, &rank), child);
      EXPECT(count == n - 1 && rank == me, "NOCOLOR split: rank %d of %d, want %d of %d", rank, count, me, n - 1);
      checkAllReduce(child, n - 1, me, "the split without the last rank");
      OK(ncclCommDestroy(child), NULL);
    }
  }
  checkAllReduce(g_comm, n, me, "the parent after splits");
}

/* ---- non-blocking communicators and configs ------------------------------------------------- */

void nonblocking(void) {
  const int n = g_n, me = g_rank;
  ncclUniqueId ids[2];
  ncclComm_t nb = NULL, child = NULL, old = NULL, bad = (ncclComm_t)&ids;
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER, badCfg = NCCL_CONFIG_INITIALIZER, oldCfg = NCCL_CONFIG_INITIALIZER;
  ncclResult_t r, state;
  float x[4] = {1, 2, 3, 4};
  const char* text;
  g_sect = S_NONBLOCK;
  memset(ids, 0, sizeof ids);
  cfg.blocking = 0;
  cfg.commName = "nonblocking";

  /* NCCL's device API (nccl_device.h, not nccl.h) is exported for the programs that import it,
     and refuses with a reason. */
  {
    extern ncclResult_t ncclDevCommCreate(ncclComm_t, const void*, void*);
    extern ncclResult_t ncclDevCommDestroy(ncclComm_t, const void*);
    char devComm[256];
    r = ncclDevCommCreate(NULL, NULL, devComm);
    text = ncclGetLastError(NULL);
    EXPECT(r == ncclInvalidUsage, "ncclDevCommCreate returned %d", (int)r);
    EXPECT(strstr(text, "device API") != NULL, "ncclDevCommCreate's text is '%s'", text);
    EXPECT(ncclDevCommDestroy(NULL, devComm) == ncclInvalidUsage, "ncclDevCommDestroy did not refuse");
  }

  /* A config that was not made by NCCL_CONFIG_INITIALIZER. */
  badCfg.magic = 0x12345678;
  r = ncclCommInitRankConfig(&bad, n, ids[0], me, &badCfg);
  text = ncclGetLastError(NULL);
  EXPECT(r == ncclInvalidArgument, "a config with a bad magic returned %d", (int)r);
  EXPECT(bad == NULL, "a failed init left *comm = %p", (void*)bad);
  EXPECT(strstr(text, "NCCL_CONFIG_INITIALIZER") != NULL, "the bad magic's text is '%s'", text);
  badCfg = cfg;
  badCfg.blocking = 2;
  r = ncclCommInitRankConfig(&bad, n, ids[0], me, &badCfg);
  EXPECT(r == ncclInvalidArgument, "config.blocking = 2 returned %d", (int)r);

  /* Rank 0 makes the ids and starts its non-blocking init at once: it cannot finish before the
   * others have the id, which rank 0 sends them only afterwards, so a call on the communicator
   * now must fail with ncclInvalidUsage, and harm nothing. */
  if (me == 0) {
    OK(ncclGetUniqueId(&ids[0]), NULL);
    OK(ncclGetUniqueId(&ids[1]), NULL);
    r = ncclCommInitRankConfig(&nb, n, ids[0], me, &cfg);
    EXPECT(r == ncclInProgress || r == ncclSuccess, "a non-blocking init returned %d: %s", (int)r,
           ncclGetLastError(NULL));
    if (r == ncclInProgress) {
      r = ncclAllReduce(x, x, 4, ncclFloat32, ncclSum, nb, NULL);
      EXPECT(r == ncclInvalidUsage, "an AllReduce during a pending init returned %d", (int)r);
      EXPECT(strlen(ncclGetLastError(nb)) > 0, "no last-error text for a call during a pending init");
      state = ncclInternalError;
      OK(ncclCommGetAsyncError(nb, &state), nb);
      EXPECT(state == ncclInProgress, "a pending init (its peers not started) is in state %d", (int)state);
    }
  }
  OK(ncclBroadcast(ids, ids, sizeof ids, ncclUint8, 0, g_comm, NULL), g_comm);
  if (me != 0) {
    r = ncclCommInitRankConfig(&nb, n, ids[0], me, &cfg);
    EXPECT(r == ncclInProgress || r == ncclSuccess, "a non-blocking init returned %d: %s", (int)r,
           ncclGetLastError(NULL));
  }
  r = settle(nb, ncclInProgress);
  EXPECT(r == ncclSuccess, "the non-blocking init ended with %d: %s", (int)r, ncclGetLastError(nb));
  if (r != ncclSuccess) return;
  {
    int count = -1, rank = -1;
    OK(ncclCommCount(nb, &count), nb);
    OK(ncclCommUserRank(nb, &rank), nb);
    EXPECT(count == n && rank == me, "the non-blocking comm: rank %d of %d", rank, count);
  }
  checkAllReduce(nb, n, me, "the non-blocking communicator");

  /* A split with config NULL inherits blocking = 0: ncclInProgress (nccl.h), then ready. */
  r = ncclCommSplit(nb, 0, n - me, &child, NULL);
  EXPECT(r == ncclInProgress, "a split of a non-blocking communicator with config NULL returned %d (want "
         "ncclInProgress: the child inherits blocking = 0)", (int)r);
  r = settle(child, r);
  EXPECT(r == ncclSuccess && child, "the split of the non-blocking communicator ended with %d: %s", (int)r,
         ncclGetLastError(child));
  if (r == ncclSuccess && child) {
    int rank = -1;
    OK(ncclCommUserRank(child, &rank), child);
    EXPECT(rank == n - 1 - me, "the reversed split: rank %d, want %d", rank, n - 1 - me);
    checkAllReduce(child, n, n - 1 - me, "the child of the non-blocking communicator");
    r = settle(child, ncclCommFinalize(child));
    EXPECT(r == ncclSuccess, "finalizing the child ended with %d", (int)r);
    OK(ncclCommDestroy(child), NULL);
  }

  /* Finalize: ncclInProgress (or done), then ncclSuccess, then destroy. */
  r = ncclCommFinalize(nb);
  EXPECT(r == ncclInProgress || r == ncclSuccess, "ncclCommFinalize on a non-blocking comm returned %d", (int)r);
  r = settle(nb, r);
  EXPECT(r == ncclSuccess, "the finalize ended with %d: %s", (int)r, ncclGetLastError(nb));
  OK(ncclCommDestroy(nb), NULL);

  /* NCCL 2.17's config: smaller, without splitShare and what follows. Fields past its size hold
   * values no version accepts (they must not be read), and blocking (2.14's) is honoured. */
  oldCfg.version = NCCL_VERSION(2, 17, 0);
  oldCfg.size = offsetof(ncclConfig_t, splitShare);
  oldCfg.blocking = 1;
  oldCfg.splitShare = 99;
  oldCfg.CTAPolicy = -5;
  oldCfg.nvlsCTAs = -1;
  r = ncclCommInitRankConfig(&old, n, ids[1], me, &oldCfg);
  EXPECT(r == ncclSuccess, "an NCCL 2.17 config returned %d: %s", (int)r, ncclGetLastError(NULL));
  if (r == ncclSuccess) {
    state = ncclInternalError;
    OK(ncclCommGetAsyncError(old, &state), old);
    EXPECT(state == ncclSuccess, "a blocking init (2.17 config) is in state %d", (int)state);
    checkAllReduce(old, n, me, "the communicator of a 2.17 config");
    OK(ncclCommDestroy(old), NULL);
  }
}

/* ---- ncclCommInitRankScalable ------------------------------------------------------------- */

void scalable(void) {
  const int n = g_n, me = g_rank;
  ncclUniqueId ids[MAX_RANKS], pair[2];
  ncclComm_t sc = NULL;
  ncclResult_t r;
  g_sect = S_SCALABLE;
  /* Id i is made by rank i * n / 2 (NCCL's rule for which rank makes which of nId ids) and every
   * rank gets both through an AllGather on the job's communicator. */
  memset(ids, 0, sizeof ids);
  if (me == 0 || me == n / 2) OK(ncclGetUniqueId(&ids[me]), NULL);
  OK(ncclAllGather(&ids[me], ids, sizeof(ncclUniqueId), ncclUint8, g_comm, NULL), g_comm);
  pair[0] = ids[0];
  pair[1] = ids[n / 2];
  r = ncclCommInitRankScalable(&sc, n, me, 2, pair, NULL);
  EXPECT(r == ncclSuccess, "ncclCommInitRankScalable returned %d: %s", (int)r, ncclGetLastError(NULL));
  if (r != ncclSuccess) return;
  {
    int count = -1, rank = -1;
    OK(ncclCommCount(sc, &count), sc);
    OK(ncclCommUserRank(sc, &rank), sc);
    EXPECT(count == n && rank == me, "the scalable comm: rank %d of %d", rank, count);
  }
  checkAllReduce(sc, n, me, "the communicator of two ids");
  OK(ncclCommDestroy(sc), NULL);
}

/* ---- shrink, healthy -------------------------------------------------------------------------- */

void shrinkHealthy(void) {
  const int n = g_n, me = g_rank;
  ncclComm_t dup = NULL, small = NULL;
  int last = n - 1, count = -1, rank = -1;
  ncclResult_t r;
  g_sect = S_SHRINK;
  OK(ncclCommSplit(g_comm, 0, me, &dup, NULL), g_comm);
  if (!dup) return;
  checkAllReduce(dup, n, me, "the duplicate to shrink");
  if (me == last) {
    /* Excluded: it does not call ncclCommShrink, and just destroys its communicator. */
    OK(ncclCommDestroy(dup), NULL);
    return;
  }
  r = ncclCommShrink(dup, &last, 1, &small, NULL, NCCL_SHRINK_DEFAULT);
  EXPECT(r == ncclSuccess || r == ncclInProgress, "ncclCommShrink(DEFAULT) returned %d: %s", (int)r,
         ncclGetLastError(dup));
  r = small ? settle(small, r) : r;
  EXPECT(r == ncclSuccess && small, "the shrink ended with %d: %s", (int)r, ncclGetLastError(small));
  if (r == ncclSuccess && small) {
    OK(ncclCommCount(small, &count), small);
    OK(ncclCommUserRank(small, &rank), small);
    EXPECT(count == n - 1 && rank == me, "the shrunk comm: rank %d of %d, want %d of %d", rank, count, me, n - 1);
    checkAllReduce(small, n - 1, me, "the shrunk communicator");
    OK(ncclCommDestroy(small), NULL);
  }
  /* The parent is still there after a shrink: destroyed now. */
  OK(ncclCommDestroy(dup), NULL);
}

/* ---- a rank killed ---------------------------------------------------------------------------- */

/* Whether text names "rank <r>" (not "rank <r><digit>"). */
static int namesRank(const char* text, int r) {
  char name[32];
  const char* p = text;
  size_t len = (size_t)snprintf(name, sizeof name, "rank %d", r);
  while ((p = strstr(p, name)) != NULL) {
    if (p[len] < '0' || p[len] > '9') return 1;
    p += len;
  }
  return 0;
}

void fault(void) {
  const int n = g_n, me = g_rank;
  int dead = VICTIM, count = -1, rank = -1, newRank = me - (me > VICTIM);
  ncclComm_t survivors = NULL;
  ncclResult_t r, state = ncclSuccess;
  const char* text;
  g_sect = S_FAULT;
  checkAllReduce(g_comm, n, me, "the AllReduce before the kill");
  if (me == VICTIM) {
    fflush(NULL);
    raise(SIGKILL); /* gone without a word, between two AllReduces */
  }
  {
    float* x = (float*)g_send;
    memset(x, 0, 4096 * sizeof(float));
    r = ncclAllReduce(x, x, 4096, ncclFloat32, ncclSum, g_comm, NULL);
  }
  text = ncclGetLastError(g_comm);
  EXPECT(r == ncclRemoteError, "the AllReduce without rank %d returned %d (%s): %s", VICTIM, (int)r,
         ncclGetErrorString(r), text);
  EXPECT(namesRank(text, VICTIM), "the last-error text does not name rank %d: '%s'", VICTIM, text);
  OK(ncclCommGetAsyncError(g_comm, &state), g_comm);
  EXPECT(state == ncclRemoteError, "the failed communicator's async error is %d", (int)state);
  r = ncclAllReduce(g_send, g_send, 1, ncclFloat32, ncclSum, g_comm, NULL);
  EXPECT(r != ncclSuccess, "a call on the failed communicator succeeded");

  /* The survivors shrink the dead rank away (config NULL: the parent's blocking mode) and go on,
   * renumbered. */
  r = ncclCommShrink(g_comm, &dead, 1, &survivors, NULL, NCCL_SHRINK_ABORT);
  EXPECT(r == ncclSuccess || r == ncclInProgress, "ncclCommShrink(ABORT) returned %d: %s", (int)r,
         ncclGetLastError(g_comm));
  r = survivors ? settle(survivors, r) : r;
  EXPECT(r == ncclSuccess && survivors, "the shrink after the kill ended with %d: %s", (int)r,
         ncclGetLastError(survivors));
  if (r == ncclSuccess && survivors) {
    OK(ncclCommCount(survivors, &count), survivors);
    OK(ncclCommUserRank(survivors, &rank), survivors);
    EXPECT(count == n - 1 && rank == newRank, "after the kill: rank %d of %d, want %d of %d", rank, count, newRank,
           n - 1);
    checkAllReduce(survivors, n - 1, newRank, "the survivors' communicator");
    /* A few exact calls of the sweep on the survivors, as the ranks they are now. */
    g_comm = survivors;
    g_n = n - 1;
    g_rank = newRank;
    runCase(K_ALLREDUCE, ncclFloat16, ncclAvg, COUNT, 0, 0);
    runCase(K_REDUCESCATTER, ncclInt8, ncclProd, COUNT, 0, 1);
    runCase(K_ALLGATHER, ncclFloat8e5m2, ncclSum, COUNT, 0, 0);
    runCase(K_BROADCAST, ncclFloat64, ncclSum, COUNT, g_n - 1, 0);
    g_n = n;
    g_rank = me;
    OK(ncclCommDestroy(survivors), NULL);
  }
  g_comm = NULL;
}

/* ---- ncclCommInitAll ------------------------------------------------------------------------- */

/* ncclCommInitAll in one process: all of its communicators, driven from this one thread through a
 * group. */
int initAllMain(void) {
  const int n = g_n;
  ncclComm_t comms[MAX_RANKS];
  int32_t* s[MAX_RANKS];
  int32_t* r[MAX_RANKS];
  int i, j, bad;
  ncclResult_t ret;
  g_rank = -1;
  g_slot = MAX_RANKS;
  g_sect = S_INITALL;
  alarm(CHILD_ALARM_S);
  ret = ncclCommInitAll(comms, n, NULL);
  EXPECT(ret == ncclSuccess, "ncclCommInitAll returned %d: %s", (int)ret, ncclGetLastError(NULL));
  if (ret != ncclSuccess) return 1;
  for (i = 0; i < n; ++i) {
    int count = -1, rank = -1;
    OK(ncclCommCount(comms[i], &count), comms[i]);
    OK(ncclCommUserRank(comms[i], &rank), comms[i]);
    EXPECT(count == n && rank == i, "ncclCommInitAll's comm %d: rank %d of %d", i, rank, count);
    s[i] = bufAlloc(COUNT * sizeof(int32_t));
    r[i] = bufAlloc(COUNT * sizeof(int32_t));
    for (j = 0; j < COUNT; ++j) {
      s[i][j] = i * 1000 + j;
      r[i][j] = -1;
    }
  }
  OK(ncclGroupStart(), NULL);
  for (i = 0; i < n; ++i) OK(ncclAllReduce(s[i], r[i], COUNT, ncclInt32, ncclSum, comms[i], NULL), comms[i]);
  OK(ncclGroupEnd(), NULL);
  for (i = 0; i < n; ++i) {
    for (bad = -1, j = 0; j < COUNT && bad < 0; ++j)
      if (r[i][j] != 1000 * n * (n - 1) / 2 + n * j) bad = j;
    EXPECT(bad < 0, "the grouped AllReduce over ncclCommInitAll's comms: rank %d element %d is %d", i, bad,
           bad < 0 ? 0 : r[i][bad]);
  }
  /* And a grouped Broadcast from the last rank, in place. */
  OK(ncclGroupStart(), NULL);
  for (i = 0; i < n; ++i) OK(ncclBcast(s[i], COUNT, ncclInt32, n - 1, comms[i], NULL), comms[i]);
  OK(ncclGroupEnd(), NULL);
  for (i = 0; i < n; ++i) {
    for (bad = -1, j = 0; j < COUNT && bad < 0; ++j)
      if (s[i][j] != (n - 1) * 1000 + j) bad = j;
    EXPECT(bad < 0, "the grouped Bcast over ncclCommInitAll's comms: rank %d element %d is %d", i, bad,
           bad < 0 ? 0 : s[i][bad]);
  }
  for (i = 0; i < n; ++i) {
    bufFree(s[i]);
    bufFree(r[i]);
    OK(ncclCommDestroy(comms[i]), NULL);
  }
  return 0;
}

