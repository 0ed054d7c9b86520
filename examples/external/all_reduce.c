/* A program of another project, using an installed braid through its C ABI
 * (see this folder's Makefile and meson.build). Under braid-run:
 *
 *   braid-run -n 2 ./all_reduce_c
 *
 * Each rank all-reduces rank + 1 into every element and checks the sum. */
#include <braid/braid.h>

#include <stdio.h>

#define COUNT 1000

int main(void) {
  braid_comm_t comm;
  braid_result_t rc = braid_comm_init_env(&comm);
  if (rc != braid_success) {
    fprintf(stderr, "all_reduce_c: braid_comm_init_env: %s: %s\n", braid_get_error_string(rc), braid_last_error());
    return 1;
  }
  int rank = 0, n = 0, version = 0;
  braid_comm_rank(comm, &rank);
  braid_comm_count(comm, &n);
  braid_get_version(&version);
  static double data[COUNT];
  for (int i = 0; i < COUNT; ++i) data[i] = rank + 1;
  rc = braid_all_reduce(data, data, COUNT, braid_f64, braid_sum, comm);
  if (rc != braid_success) {
    fprintf(stderr, "all_reduce_c: braid_all_reduce: %s: %s\n", braid_get_error_string(rc), braid_last_error());
    return 1;
  }
  const double expected = n * (n + 1) / 2.0;
  int wrong = 0;
  for (int i = 0; i < COUNT; ++i) wrong += data[i] != expected;
  printf("all_reduce_c: rank %d of %d: sum %g (expected %g), %d wrong, braid %d (headers %d)\n", rank, n, data[0],
         expected, wrong, version, BRAID_VERSION_CODE);
  braid_comm_destroy(comm);
  return wrong == 0 && version == BRAID_VERSION_CODE ? 0 : 1;
}
