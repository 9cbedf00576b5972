/* A rank as a launcher starts it (tests/launch/test_launchers.sh): joins the job through
 * horaCommInitFromEnv, all-reduces rank + 1 and checks the sum against the size it was given.
 * Prints "rank R of N: sum S ok" and exits 0; on any error prints "error: <horaGetLastError>"
 * to stdout and exits 1. Plain C, through the public header only, as a user's program is. */
#include <hora.h>
#include <stdio.h>

int main(void) {
  horaComm_t comm = NULL;
  if (horaCommInitFromEnv(&comm) != horaSuccess) {
    printf("error: %s\n", horaGetLastError(NULL));
    return 1;
  }
  int rank = -1, size = -1;
  horaCommUserRank(comm, &rank);
  horaCommCount(comm, &size);
  float v[4];
  for (int i = 0; i < 4; ++i) v[i] = (float)(rank + 1);
  if (horaAllReduce(v, v, 4, horaFloat32, horaSum, comm, NULL) != horaSuccess) {
    printf("error: %s\n", horaGetLastError(comm));
    return 1;
  }
  const float want = (float)size * (float)(size + 1) / 2.0f;
  for (int i = 0; i < 4; ++i)
    if (v[i] != want) {
      printf("error: rank %d of %d: element %d is %g, not %g\n", rank, size, i, v[i], want);
      return 1;
    }
  printf("rank %d of %d: sum %g ok\n", rank, size, want);
  fflush(stdout);
  horaCommDestroy(comm);
  return 0;
}
