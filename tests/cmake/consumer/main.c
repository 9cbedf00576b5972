/* Links Hora::hora: the library's version and a one-rank AllReduce. */
#include <hora.h>
#include <stdio.h>

int main(void) {
  int version = 0;
  if (horaGetVersion(&version) != horaSuccess || version != HORA_VERSION_CODE) return 1;
  horaComm_t comm;
  float x = 3, y = 0;
  if (horaCommInitAll(&comm, 1, NULL) != horaSuccess) return 2;
  if (horaAllReduce(&x, &y, 1, horaFloat32, horaSum, comm, NULL) != horaSuccess || y != 3) return 3;
  if (horaCommDestroy(comm) != horaSuccess) return 4;
  printf("hora consumer: version %d, AllReduce exact\n", version);
  return 0;
}
