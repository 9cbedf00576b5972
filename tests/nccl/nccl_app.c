/* nccl_app: an application written only against nccl.h (C99), as an NCCL user writes one, linked
 * against Hora's libnccl.so.2 and nothing else.
 *
 *   nccl_app <nranks> <host|device>
 *
 * The parent forks <nranks> ranks, makes the job's unique id (ncclGetUniqueId) and hands it to
 * them through pipes; each calls ncclCommInitRank with it and then checks, each against a
 * reference this program computes itself (exact results, never timings):
 *   collectives  every collective x every dtype (fp8 and the 16-bit floats included) x every op,
 *                in and out of place, roots other than 0, counts 1031, 1 and 0 (and one large)
 *   premulsum    ncclRedOpCreatePreMulSum (float, half and int32 scalars), ncclRedOpDestroy
 *   groups       several collectives in one group; ncclGroupSimulateEnd
 *   p2p          a ring of ncclSend/ncclRecv in a group, pair exchanges grouped and not
 *   split        ncclCommSplit (even/odd, reversed keys; NCCL_SPLIT_NOCOLOR; config NULL)
 *   nonblocking  config.blocking = 0 (init, split, finalize), a call during a pending init,
 *                a config with a bad magic, an NCCL 2.17 config
 *   badinput     bad datatype / op / root / buffers / comm: errors, texts, the comm goes on
 *   register     ncclCommRegister/Deregister, ncclCommWindowRegister/Deregister
 *   scalable     ncclCommInitRankScalable with two ids made by two ranks
 *   shrink       NCCL_SHRINK_DEFAULT on a healthy communicator
 *   fault        a rank SIGKILLs itself between two AllReduces; the others get ncclRemoteError
 *                naming it, shrink it away (NCCL_SHRINK_ABORT) and go on
 *   initall      (a process of its own) ncclCommInitAll and a grouped AllReduce over its comms
 *
 * With `device`, buffers come from ncclMemAlloc; run it with HORA_CUDA=emulate (Hora's emulated
 * GPU) where there is no GPU. The emulated GPU's device memory is host-visible shared memory, so
 * this program fills and reads those buffers directly, as it could not on a real GPU (there it
 * would cudaMemcpy). With `host`, buffers are malloc'd host memory (Hora accepts host buffers
 * where NCCL wants device ones) and, where the machine has no GPU, ncclMemAlloc must fail with
 * ncclUnhandledCudaError and a last-error text.
 *
 * Exit status 0 only if every check of every process passed and every process ended as
 * intended (the fault's victim by its own SIGKILL, every other one by exit(0)); a summary of the
 * checks run is printed. Every child has an alarm(), so no hang can outlive the test.
 *
 * The sections are in nccl_app_collectives.c and nccl_app_lifecycle.c, their shared helpers in
 * nccl_app_common.{h,c}.
 */
#include "nccl_app_common.h"

/* ---- basics: version, error strings, ncclMemAlloc --------------------------------------------- */

static void basics(void) {
  int v = 0, code, count = -1, dev = -2;
  void* p = NULL;
  ncclResult_t r;
  g_sect = S_BASICS;
  OK(ncclGetVersion(&v), NULL);
  EXPECT(v == NCCL_VERSION_CODE && v == 22803, "ncclGetVersion gave %d", v);
  EXPECT(NCCL_VERSION(2, 28, 3) == 22803 && NCCL_VERSION(2, 8, 4) == 2804, "NCCL_VERSION is wrong");
  for (code = ncclSuccess; code < ncclNumResults; ++code) {
    const char* s = ncclGetErrorString((ncclResult_t)code);
    EXPECT(s && strlen(s) > 0, "ncclGetErrorString(%d) is empty", code);
  }
  EXPECT(strlen(ncclGetErrorString((ncclResult_t)1234)) > 0, "ncclGetErrorString(1234) is empty");
  if (g_comm) {
    OK(ncclCommCount(g_comm, &count), g_comm);
    EXPECT(count == g_n, "ncclCommCount gave %d", count);
    OK(ncclCommUserRank(g_comm, &count), g_comm);
    EXPECT(count == g_rank, "ncclCommUserRank gave %d", count);
    OK(ncclCommCuDevice(g_comm, &dev), g_comm);
  }
  if (g_device) {
    OK(ncclMemAlloc(&p, 1 << 20), NULL);
    EXPECT(p != NULL, "ncclMemAlloc gave NULL");
    if (p) {
      memset(p, 1, 1 << 20); /* the emulated GPU's memory is host-visible */
      OK(ncclMemFree(p), NULL);
    }
  } else if (access("/dev/nvidiactl", F_OK) != 0) {
    /* No GPU on this machine (and no HORA_CUDA=emulate): no device memory to give. */
    r = ncclMemAlloc(&p, 4096);
    EXPECT(r == ncclUnhandledCudaError, "ncclMemAlloc without a GPU returned %d", (int)r);
    EXPECT(strlen(ncclGetLastError(NULL)) > 0, "ncclMemAlloc without a GPU left no last-error text");
  }
}

/* ---- a rank ----------------------------------------------------------------------------------- */

static int rankMain(ncclUniqueId id, int rank) {
  ncclResult_t r;
  g_rank = rank;
  g_slot = rank;
  g_sect = S_BASICS;
  alarm(CHILD_ALARM_S); /* a hang kills the rank (SIGALRM), which fails the test */
  r = ncclCommInitRank(&g_comm, g_n, id, rank);
  EXPECT(r == ncclSuccess, "ncclCommInitRank returned %d: %s", (int)r, ncclGetLastError(NULL));
  if (r != ncclSuccess) return 1;
  basics();

  g_cap = (size_t)g_n * (COUNT * 8 > BIG_COUNT * 4 ? COUNT * 8 : BIG_COUNT * 4) + 4 * GUARD;
  g_send = bufAlloc(g_cap);
  g_recv = bufAlloc(g_cap);
  g_want = malloc(g_cap);
  g_input = malloc(g_cap);
  if (!g_want || !g_input) return 1;

  collectives();
  premulSum();
  p2p();
  groups();
  badInput();
  registration();
  split();
  nonblocking();
  scalable();
  shrinkHealthy();
  fault(); /* the victim does not come back from it */

  bufFree(g_send);
  bufFree(g_recv);
  free(g_want);
  free(g_input);
  return 0;
}

static int describe(int st, char* buf, size_t len) {
  if (WIFEXITED(st)) return snprintf(buf, len, "exit %d", WEXITSTATUS(st));
  if (WIFSIGNALED(st)) return snprintf(buf, len, "signal %d (%s)", WTERMSIG(st), strsignal(WTERMSIG(st)));
  return snprintf(buf, len, "status 0x%x", st);
}

int main(int argc, char** argv) {
  ncclUniqueId id;
  pid_t pids[MAX_RANKS + 1];
  int pipes[MAX_RANKS + 1][2];
  int r, s, st, bad = 0, total = 0, v = 0;
  char how[64];
  if (argc != 3 || atoi(argv[1]) < 2 || atoi(argv[1]) > MAX_RANKS ||
      (strcmp(argv[2], "host") != 0 && strcmp(argv[2], "device") != 0)) {
    fprintf(stderr, "usage: %s <nranks: 2..%d> <host|device>\n", argv[0], MAX_RANKS);
    return 2;
  }
  g_n = atoi(argv[1]);
  g_device = strcmp(argv[2], "device") == 0;
  /* Hora's wait limit (NCCL has none): a dead peer is found at once, a silent one after this. */
  setenv("HORA_TIMEOUT_MS", "20000", 0);

  g_tally = mmap(NULL, sizeof(Tally), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (g_tally == MAP_FAILED) return 2;
  memset(g_tally, 0, sizeof(Tally));

  if (ncclGetVersion(&v) != ncclSuccess || v != NCCL_VERSION_CODE) {
    fprintf(stderr, "ncclGetVersion gave %d\n", v);
    return 1;
  }
  /* Every process is forked before ncclGetUniqueId starts the rendezvous's thread here, and gets
   * the id (or, the ncclCommInitAll one, its turn) through a pipe, as a launcher hands it over: a
   * child forked while another thread of its parent holds a lock (the allocator's, a sanitizer's)
   * could never take it. */
  fflush(NULL);
  for (r = 0; r <= g_n; ++r) {
    const int slot = r < g_n ? r : MAX_RANKS;
    if (pipe(pipes[slot]) != 0) return 2;
    pids[slot] = fork();
    if (pids[slot] < 0) return 2;
    if (pids[slot] == 0) {
      size_t got = 0;
      close(pipes[slot][1]);
      while (got < sizeof id) {
        ssize_t k = read(pipes[slot][0], (char*)&id + got, sizeof id - got);
        if (k <= 0) _exit(3);
        got += (size_t)k;
      }
      _exit(r < g_n ? rankMain(id, r) : initAllMain());
    }
    close(pipes[slot][0]);
  }
  if (ncclGetUniqueId(&id) != ncclSuccess) {
    fprintf(stderr, "ncclGetUniqueId: %s\n", ncclGetLastError(NULL));
    return 1;
  }
  for (r = 0; r < g_n; ++r) {
    if (write(pipes[r][1], &id, sizeof id) != (ssize_t)sizeof id) return 2;
    close(pipes[r][1]);
  }
  for (r = 0; r < g_n; ++r) {
    if (waitpid(pids[r], &st, 0) != pids[r]) {
      fprintf(stderr, "nccl_app: waitpid for rank %d failed\n", r);
      bad = 1;
      continue;
    }
    describe(st, how, sizeof how);
    if (r == VICTIM ? !(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL) : !(WIFEXITED(st) && WEXITSTATUS(st) == 0)) {
      fprintf(stderr, "nccl_app: rank %d ended with %s, want %s\n", r, how,
              r == VICTIM ? "its own SIGKILL" : "exit 0");
      bad = 1;
    }
  }
  /* ncclCommInitAll in a process of its own, after the job (it waits for any id as its turn). */
  if (write(pipes[MAX_RANKS][1], &id, sizeof id) != (ssize_t)sizeof id) return 2;
  close(pipes[MAX_RANKS][1]);
  if (waitpid(pids[MAX_RANKS], &st, 0) != pids[MAX_RANKS] || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
    describe(st, how, sizeof how);
    fprintf(stderr, "nccl_app: the ncclCommInitAll process ended with %s\n", how);
    bad = 1;
  }

  printf("nccl_app: %d ranks, %s buffers:", g_n, g_device ? "device (ncclMemAlloc)" : "host");
  for (s = 0; s < NSECT; ++s) {
    int checks = 0, fails = 0;
    for (r = 0; r <= MAX_RANKS; ++r) {
      checks += g_tally->checks[r][s];
      fails += g_tally->fails[r][s];
    }
    total += checks;
    printf(" %s %d", sectName[s], checks);
    if (fails) {
      printf(" (%d FAILED)", fails);
      bad = 1;
    }
    if (checks == 0) {
      printf(" (none ran)");
      bad = 1;
    }
    printf(s + 1 < NSECT ? "," : "\n");
  }
  printf("nccl_app: %d checks, %s\n", total, bad ? "FAILED" : "every one passed");
  return bad;
}
