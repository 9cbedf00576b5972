/* A rank for the tests of hora-run --status and of hora-run's report on --timeout
 * (tests/trace/test_status.sh). Usage: trace_rank DIR
 *
 * Joins the job (horaCommInitFromEnv), makes three AllReduces of 2 floats, writes DIR/ready.<rank>;
 * then the last rank sleeps in its own code, blocked opening the fifo DIR/release until the script
 * opens it, while the others make a fourth AllReduce (which waits for the last rank). Then all
 * destroy their communicator and exit 0. Plain C through the public header, as a user's program. */
#include <fcntl.h>
#include <hora.h>
#include <stdio.h>
#include <unistd.h>

static int failed(horaComm_t comm, const char* what) {
  printf("error: %s: %s\n", what, horaGetLastError(comm));
  return 1;
}

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: trace_rank DIR\n");
    return 2;
  }
  horaComm_t comm = NULL;
  if (horaCommInitFromEnv(&comm) != horaSuccess) return failed(NULL, "init");
  int rank = -1, size = -1;
  horaCommUserRank(comm, &rank);
  horaCommCount(comm, &size);
  float v[2] = {1, 2};
  for (int i = 0; i < 3; ++i)
    if (horaAllReduce(v, v, 2, horaFloat32, horaSum, comm, NULL) != horaSuccess) return failed(comm, "allreduce");
  char path[4096];
  snprintf(path, sizeof path, "%s/ready.%d", argv[1], rank);
  FILE* f = fopen(path, "w");
  if (f) fclose(f);
  if (rank == size - 1) {
    snprintf(path, sizeof path, "%s/release", argv[1]);
    int fd = open(path, O_RDONLY);
    if (fd < 0) return failed(comm, "open the fifo");
    close(fd);
  }
  if (horaAllReduce(v, v, 2, horaFloat32, horaSum, comm, NULL) != horaSuccess) return failed(comm, "the fourth allreduce");
  horaCommDestroy(comm);
  return 0;
}
