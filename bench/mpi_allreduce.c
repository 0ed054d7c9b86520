/* The peer side of bench/compare_mpi.sh: MPI_Allreduce timed the way
 * braid-perf times braid (warm-up, back-to-back iterations, slowest rank's
 * average, the same busbw factor 2(n-1)/n), float32 sum, printing the same
 * columns so the two tables can be read side by side.
 *
 *   mpirun -np 2 mpi_allreduce -b 8 -e 64M -f 4 [-n ITERS] [-w WARMUP]
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static size_t parse_size(const char* text) {
  char* end = NULL;
  double v = strtod(text, &end);
  if (*end == 'K' || *end == 'k') v *= 1024;
  else if (*end == 'M') v *= 1024 * 1024;
  else if (*end == 'G') v *= 1024.0 * 1024 * 1024;
  return (size_t)v;
}

int main(int argc, char** argv) {
  size_t min_bytes = 8, max_bytes = 64 << 20, factor = 2;
  int iters = 20, warmup = 5;
  MPI_Init(&argc, &argv);
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "-b")) min_bytes = parse_size(argv[i + 1]);
    else if (!strcmp(argv[i], "-e")) max_bytes = parse_size(argv[i + 1]);
    else if (!strcmp(argv[i], "-f")) factor = parse_size(argv[i + 1]);
    else if (!strcmp(argv[i], "-n")) iters = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "-w")) warmup = atoi(argv[i + 1]);
  }
  int rank, n;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  size_t max_count = max_bytes / sizeof(float);
  float* send = malloc(max_count * sizeof(float) + 64);
  float* recv = malloc(max_count * sizeof(float) + 64);
  for (size_t i = 0; i < max_count; ++i) send[i] = (float)(rank + 1);
  if (rank == 0) {
    printf("# mpi_allreduce: %d ranks, f32 sum, iters %d, warmup %d\n#\n", n, iters, warmup);
    printf("# %12s %12s %6s %6s %6s %12s %10s %10s %8s\n", "size(B)", "count", "type", "redop", "root", "time(us)",
           "algbw(GB/s)", "busbw(GB/s)", "#wrong");
  }
  for (size_t bytes = min_bytes; bytes <= max_bytes; bytes *= factor) {
    size_t count = bytes / sizeof(float) ? bytes / sizeof(float) : 1;
    for (int i = 0; i < warmup; ++i) MPI_Allreduce(send, recv, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Barrier(MPI_COMM_WORLD);
    double start = MPI_Wtime();
    for (int i = 0; i < iters; ++i) MPI_Allreduce(send, recv, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    double local_us = (MPI_Wtime() - start) * 1e6 / iters, slowest_us = 0;
    MPI_Allreduce(&local_us, &slowest_us, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    long wrong = 0;
    float expected = (float)n * (float)(n + 1) / 2.0f;
    for (size_t i = 0; i < count; ++i) wrong += recv[i] != expected;
    long total_wrong = 0;
    MPI_Allreduce(&wrong, &total_wrong, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    double algbw = (double)(count * sizeof(float)) / (slowest_us * 1e3);
    if (rank == 0)
      printf("  %12zu %12zu %6s %6s %6d %12.2f %10.3f %10.3f %8ld\n", count * sizeof(float), count, "f32", "sum", -1,
             slowest_us, algbw, algbw * 2.0 * (n - 1) / n, total_wrong);
    fflush(stdout);
    if (bytes > max_bytes / factor) break;
  }
  free(send);
  free(recv);
  MPI_Finalize();
  return 0;
}
