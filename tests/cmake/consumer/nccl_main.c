/* Links Hora::nccl: NCCL's version and a one-rank AllReduce on host buffers. */
#include <nccl.h>
#include <stdio.h>

int main(void) {
  int version = 0;
  ncclComm_t comm;
  float x = 2, y = 0;
  if (ncclGetVersion(&version) != ncclSuccess || version != NCCL_VERSION_CODE) return 1;
  if (ncclCommInitAll(&comm, 1, NULL) != ncclSuccess) return 2;
  if (ncclAllReduce(&x, &y, 1, ncclFloat, ncclSum, comm, NULL) != ncclSuccess || y != 2) return 3;
  if (ncclCommDestroy(comm) != ncclSuccess) return 4;
  printf("nccl consumer: version %d, AllReduce exact\n", version);
  return 0;
}
